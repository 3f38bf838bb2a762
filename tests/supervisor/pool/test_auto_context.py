"""``context_length: auto``: the config accepts it where a KV cache exists, and the
decision (``pool/auto_context.py``) on model folders with a ``config.json`` and a
safetensors header of a given dtype. The real worker's measured KV cache is the
check in tests/e2e/test_auto_context.py."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from mlx_gateway.supervisor.config import ConfigError, ModelConfig, load_config
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.pool.auto_context import decide
from mlx_gateway.supervisor.pool.memory import compute_dtype_bytes

LLAMA = {
    "model_type": "llama",
    "hidden_size": 512,
    "num_hidden_layers": 8,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 32768,
}
PER_TOKEN_FP16 = 2 * 8 * 4 * 64 * 2  # keys and values, layers, kv heads, head dim, 2 bytes


def folder(tmp_path: Path, meta: dict[str, Any], dtypes: dict[str, str]) -> Path:
    """A model folder: its config.json and a safetensors file holding only a header."""
    out = tmp_path / "model"
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(meta))
    header = {
        name: {"dtype": d, "shape": [1], "data_offsets": [0, 0]} for name, d in dtypes.items()
    }
    raw = json.dumps(header).encode()
    (out / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    return out


def model(path: Path, **extra: Any) -> ModelConfig:
    return model_entry(model_path=str(path), context_length="auto", **extra)


def test_the_largest_multiple_of_1024_that_fits(tmp_path: Path) -> None:
    path = folder(tmp_path, LLAMA, {"a.weight": "BF16", "b.weight": "BF16"})
    chosen = decide(model(path), kv_budget=10_000 * PER_TOKEN_FP16)
    assert chosen is not None and chosen.fits
    assert (chosen.tokens, chosen.own) == (9216, 32768)
    assert chosen.kv_bytes == 9216 * PER_TOKEN_FP16
    # Room for more than the model's own: its own, not more.
    assert decide(model(path), kv_budget=10**12).tokens == 32768  # type: ignore[union-attr]
    # Not even 1024 tokens: 1024, and it says so.
    small = decide(model(path), kv_budget=100 * PER_TOKEN_FP16)
    assert small is not None and (small.tokens, small.fits) == (1024, False)
    # Unknown budget (not downloaded, no estimate): no decision.
    assert decide(model(path), kv_budget=None) is None


def test_element_size_from_the_weights_dtype_and_kv_bits(tmp_path: Path) -> None:
    # A quantized model: packed integers, bf16 scales and biases → 2 bytes.
    quantized = {"w.weight": "U32", "w.scales": "BF16", "w.biases": "BF16", "n.weight": "BF16"}
    assert compute_dtype_bytes(folder(tmp_path, LLAMA, quantized)) == 2
    fp32 = folder(tmp_path / "x", LLAMA, {"a.weight": "F32"})
    assert compute_dtype_bytes(fp32) == 4
    assert decide(model(fp32), kv_budget=10_000 * PER_TOKEN_FP16).tokens == 4096  # type: ignore[union-attr]
    # kv_bits 4, group 64: 0.5 + 4/64 bytes an element instead of 4.
    four = decide(model(fp32, kv_bits=4), kv_budget=10_000 * PER_TOKEN_FP16)
    assert four is not None and four.tokens == 32768


def test_sliding_layers_and_max_kv_size_bound_it(tmp_path: Path) -> None:
    gemma = {**LLAMA, "sliding_window": 512, "sliding_window_pattern": 4}  # 6 of 8 slide
    path = folder(tmp_path, gemma, {"a.weight": "BF16"})
    per_layer = PER_TOKEN_FP16 // 8
    budget = 10_000 * 2 * per_layer + 512 * 6 * per_layer  # 2 full layers, 6 at their window
    assert decide(model(path), kv_budget=budget).tokens == 9216  # type: ignore[union-attr]
    bounded = folder(tmp_path / "b", LLAMA, {"a.weight": "BF16"})
    capped = decide(model(bounded, max_kv_size=2048), kv_budget=2048 * PER_TOKEN_FP16)
    assert capped is not None and capped.tokens == 32768  # the cache never grows past 2048


def test_config_accepts_auto_only_where_there_is_a_kv_cache(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("models:\n  - model_path: org/m\n    context_length: auto\n")
    (entry,) = load_config(config).models
    assert entry.context_length == "auto" and entry.fixed_context_length is None
    config.write_text(
        "models:\n  - model_path: org/e\n    model_type: embeddings\n    context_length: auto\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert "context_length: 'auto' applies to language and vision models" in str(info.value)
    assert "this entry's model_type is 'embeddings'" in str(info.value)
    config.write_text("models:\n  - model_path: org/m\n    context_length: lots\n")
    with pytest.raises(ConfigError, match="context_length"):
        load_config(config)
