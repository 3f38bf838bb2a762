"""The libraries already on disk, served by a real gateway process: a fake Ollama
store and a fake LM Studio folder in a temporary HOME. The Ollama model is listed
by ``ollama.Client.list`` under its name and chats through the official client,
its blob read in place (the converted folder is the only new file); LM Studio's
GGUF and MLX folder chat through the official ``openai`` client; ``/v1/models``
gives each its source, and ``/fit`` sizes the GGUFs before their conversion."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import ollama
import openai
import pytest
from gguf import GGMLQuantizationType

from mlx_gateway.store.gguf_header import converted_bytes, read_header
from tests.e2e.gateway import Gateway
from tests.fixtures.libraries import lmstudio_gguf, lmstudio_mlx_folder, ollama_store_model
from tests.fixtures.tiny_gguf import build_tiny_gguf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
T = GGMLQuantizationType


def test_ollama_and_lmstudio_libraries_are_listed_and_served(
    tmp_path: Path, tiny_lm_path: Path
) -> None:
    home, state = tmp_path / "home", tmp_path / "state"
    tiny = build_tiny_gguf(tmp_path / "tiny.gguf", "llama", T.Q8_0).path
    blob = ollama_store_model(home / ".ollama" / "models", "tiny", tiny)
    digest = hashlib.sha256(blob.read_bytes()).hexdigest()
    models = home / ".lmstudio" / "models"
    lmstudio_mlx_folder(models, "mlx-community/tiny-mlx", tiny_lm_path)
    other = build_tiny_gguf(tmp_path / "other.gguf", "qwen2", T.Q4_K, seed=1).path
    lms_gguf = lmstudio_gguf(models, "pub/tiny-GGUF", other, "tiny-Q4_K_M.gguf")
    gateway = Gateway(
        tmp_path,
        [{"model_path": str(tiny_lm_path), "served_model_name": "own"}],
        env={"HOME": str(home), "MLX_GATEWAY_CACHE_DIR": str(state)},
        serve_ollama_library=True,
        serve_lmstudio_library=True,
    )
    try:
        listed = httpx.get(f"{gateway.base_url}/v1/models", timeout=10).json()["data"]
        assert {m["id"]: m["source"] for m in listed} == {
            "own": "config",
            "tiny": "ollama",
            "mlx-community/tiny-mlx": "lmstudio",
            "pub/tiny-GGUF": "lmstudio",
        }
        # Sized before any conversion, from the GGUF's header at the converted bits.
        for name, gguf in (("tiny", blob), ("pub/tiny-GGUF", lms_gguf)):
            fit = httpx.get(f"{gateway.base_url}/v1/models/{name}/fit", timeout=10).json()
            assert fit["need_source"] == "estimated"
            assert fit["need"] > converted_bytes(read_header(gguf).tensors)

        client = ollama.Client(host=gateway.base_url, timeout=300)
        tags = {m.model: m for m in client.list().models}
        assert {"tiny:latest", "pub/tiny-GGUF:latest", "own:latest"} <= set(tags)
        reply = client.chat(
            model="tiny",
            messages=[{"role": "user", "content": "hello"}],
            options={"num_predict": 4, "temperature": 0},
        )
        assert reply.message.content and reply.done_reason in ("stop", "length")
        client.close()

        chat = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="none", max_retries=0)
        # The name as /api/tags lists it is the same model on the OpenAI API.
        answer = chat.chat.completions.create(
            model="tiny:latest", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
        assert answer.model == "tiny" and answer.choices[0].finish_reason in ("stop", "length")
        for name in ("pub/tiny-GGUF", "mlx-community/tiny-mlx"):
            answer = chat.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=4
            )
            assert answer.model == name and answer.choices[0].finish_reason in ("stop", "length")
    finally:
        gateway.stop()
    # Read in place: no copy in the gateway's own Ollama store, the blob untouched;
    # the converted folders (one keyed by the blob's digest) are the new files.
    assert not (state / "ollama").exists()
    assert hashlib.sha256(blob.read_bytes()).hexdigest() == digest
    converted = sorted(p.name for p in (state / "gguf").iterdir() if p.is_dir())
    assert digest in converted and len(converted) == 2
