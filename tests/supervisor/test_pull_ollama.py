"""``mlx-gateway pull llama3.2``: an Ollama name pulled from a local stand-in for
Ollama's registry into the gateway's store, and recorded in ``pulled.json`` so the
gateway serves it; a hub repo id beside it keeps its meaning."""

from __future__ import annotations

import argparse
import io
import json
from contextlib import redirect_stdout
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType

from mlx_gateway.store.ollama_store import OllamaName, find_blob, own_store
from mlx_gateway.supervisor.config.pulled import PulledModels, with_pulled
from mlx_gateway.supervisor.config.schema import GatewayConfig, ModelConfig
from mlx_gateway.supervisor.pull import run
from tests.fixtures.ollama_registry import OllamaRegistry
from tests.fixtures.tiny_gguf import build_tiny_gguf


def test_pull_an_ollama_name_from_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gguf = build_tiny_gguf(tmp_path / "t.gguf", "llama", GGMLQuantizationType.Q4_0).path
    monkeypatch.setenv("MLX_GATEWAY_CACHE_DIR", str(tmp_path / "state"))
    with OllamaRegistry() as registry:
        digest = registry.add("library/llama3.2:latest", gguf)
        monkeypatch.setenv("MLX_GATEWAY_OLLAMA_REGISTRY", registry.url)
        out = io.StringIO()
        with redirect_stdout(out):
            code = run(argparse.Namespace(config=None, models=["llama3.2"]))
    assert code == 0, out.getvalue()
    blob = find_blob(OllamaName.parse("llama3.2"), [own_store()])
    assert blob is not None and blob.name == digest.replace(":", "-")
    assert blob.read_bytes() == gguf.read_bytes()
    assert PulledModels.read().models == {"ollama:llama3.2:latest": "lm"}
    base = GatewayConfig(models=[ModelConfig(model_path="org/other", served_model_name="x")])
    [entry] = with_pulled(base).models[1:]
    assert (entry.model_path, entry.served_model_name) == ("ollama:llama3.2:latest", "llama3.2")
    assert "1 pulled, 0 failed" in out.getvalue()
    assert json.loads((tmp_path / "state" / "pulled.json").read_text())["models"]


def test_an_unknown_name_fails_with_the_registry_s_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLX_GATEWAY_CACHE_DIR", str(tmp_path / "state"))
    with OllamaRegistry() as registry:
        monkeypatch.setenv("MLX_GATEWAY_OLLAMA_REGISTRY", registry.url)
        out = io.StringIO()
        with redirect_stdout(out):
            code = run(argparse.Namespace(config=None, models=["qwen3:4b"]))
    assert code == 1
    assert "no such model" in out.getvalue()
    assert PulledModels.read().models == {}
