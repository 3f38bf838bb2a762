"""A GGUF model's memory before and after its conversion: the gateway's header
reader agrees with the ``gguf`` package, its estimate of the converted weights
equals what the converter really writes (for types kept, requantized and float),
and once converted the estimate reads the converted folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGMLQuantizationType, GGUFReader

from mlx_gateway.store.gguf_header import TYPES, read_header
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.pool.gguf_size import gguf_size
from mlx_gateway.supervisor.pool.memory import estimate, model_dir, weights_on_disk
from mlx_gateway.workers.lm.gguf.model import gguf_model
from tests.fixtures.libraries import ollama_store_model
from tests.fixtures.tiny_gguf import build_tiny_gguf

T = GGMLQuantizationType


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MLX_GATEWAY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    return tmp_path / "cache"


def test_type_numbers_are_the_gguf_packages() -> None:
    assert {number: T(number).name for number in TYPES} == TYPES


def test_the_header_reader_agrees_with_the_gguf_package(tmp_path: Path) -> None:
    path = build_tiny_gguf(tmp_path / "m.gguf", "gemma3", T.Q4_K).path
    ours, theirs = read_header(path), GGUFReader(path)
    assert [(t.name, t.dims, t.type_name) for t in ours.tensors] == [
        (t.name, tuple(int(d) for d in t.shape), t.tensor_type.name) for t in theirs.tensors
    ]
    assert ours.architecture == "gemma3"
    assert ours.meta("{arch}.block_count") == 6
    vocab = theirs.fields["tokenizer.ggml.tokens"]
    assert ours.metadata["tokenizer.ggml.tokens"] == len(vocab.data)  # skipped: its length


@pytest.mark.parametrize(
    ("arch", "kind"),
    [("llama", T.Q8_0), ("qwen2", T.Q4_0), ("qwen3", T.Q4_K), ("llama", T.Q5_0), ("gemma", T.F16)],
)
def test_the_estimate_before_conversion_is_the_converted_size(
    tmp_path: Path, arch: str, kind: GGMLQuantizationType
) -> None:
    path = build_tiny_gguf(tmp_path / "m.gguf", arch, kind).path
    config = model_entry("lm", model_path=str(path))
    before = estimate(config)
    size = gguf_size(str(path))
    assert size is not None and model_dir(str(path)) is None
    assert before.source == "estimated" and before.parts["weights"] == size.weights
    assert before.parts["kv"] > 0  # the KV cache from the GGUF's layers and heads

    folder = gguf_model(str(path), lambda line: None)
    assert folder is not None
    real = weights_on_disk(folder)
    assert abs(size.weights - real) / real < 0.02, (size.weights, real)
    # Converted: the folder is the model's files now.
    assert model_dir(str(path)) == folder and gguf_size(str(path)) is None
    after = estimate(config)
    assert after.parts["weights"] == real
    assert abs(after.parts["kv"] - before.parts["kv"]) <= 0.05 * before.parts["kv"]


def test_an_ollama_name_is_sized_from_its_blob(tmp_path: Path) -> None:
    tiny = build_tiny_gguf(tmp_path / "m.gguf", "llama", T.Q4_K).path
    ollama_store_model(tmp_path / "ollama", "tiny", tiny)
    config = model_entry("lm", model_path="ollama:tiny:latest", served_model_name="tiny")
    need = estimate(config)
    assert need.source == "estimated" and need.parts["weights"] > tiny.stat().st_size
