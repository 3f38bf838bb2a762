"""Ollama names through ``/api/pull``, with the official ``ollama`` client against a
real gateway process and a local stand-in for Ollama's registry: the pull streams
Ollama's progress lines, the model is listed as ``tiny:latest`` and chats (its GGUF
converted by the worker); a dropped download resumes with a ``Range`` request; a
blob whose digest is wrong fails the pull and leaves nothing behind."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import ollama
import pytest
from gguf import GGMLQuantizationType

from tests.e2e.gateway import Gateway
from tests.fixtures.ollama_registry import OllamaRegistry
from tests.fixtures.tiny_gguf import build_tiny_gguf

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OllamaRegistry]:
    tmp = tmp_path_factory.mktemp("registry")
    gguf = build_tiny_gguf(tmp / "tiny.gguf", "llama", GGMLQuantizationType.Q8_0).path
    other = build_tiny_gguf(tmp / "cut.gguf", "qwen2", GGMLQuantizationType.Q4_0, seed=1).path
    with OllamaRegistry() as server:
        server.add("library/tiny:latest", gguf)
        server.add("library/cut:latest", other, cut_after=50_000)
        server.add("library/bad:latest", gguf, wrong_digest=True)
        yield server


@pytest.fixture(scope="module")
def gateway(
    registry: OllamaRegistry, tiny_lm_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("ollama-names")
    gw = Gateway(
        tmp,
        [{"served_model_name": "other", "model_path": str(tiny_lm_path)}],
        env={
            "MLX_GATEWAY_OLLAMA_REGISTRY": registry.url,
            "MLX_GATEWAY_CACHE_DIR": str(tmp / "state"),
        },
    )
    gw.state = tmp / "state"  # type: ignore[attr-defined]
    yield gw
    gw.stop()


@pytest.fixture
def client(gateway: Gateway) -> Iterator[ollama.Client]:
    made = ollama.Client(host=gateway.base_url, timeout=300)
    yield made
    made.close()


def test_pull_streams_progress_then_the_model_is_listed_and_chats(
    client: ollama.Client, gateway: Gateway
) -> None:
    lines = list(client.pull("tiny:latest", stream=True))
    statuses = [line.status for line in lines]
    assert statuses[0] == "pulling manifest"
    assert statuses[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    model_lines = [line for line in lines if line.total and line.total > 10_000]
    assert model_lines and model_lines[-1].completed == model_lines[-1].total
    assert model_lines[-1].status == f"pulling {model_lines[-1].digest[7:19]}"

    names = [m.model for m in client.list().models]
    assert "tiny:latest" in names
    reply = client.chat(
        model="tiny:latest",
        messages=[{"role": "user", "content": "hello"}],
        options={"num_predict": 4, "temperature": 0},
    )
    assert reply.message.content
    assert reply.done_reason in ("stop", "length")


def test_an_interrupted_pull_resumes(
    client: ollama.Client, gateway: Gateway, registry: OllamaRegistry
) -> None:
    with pytest.raises(ollama.ResponseError, match="pull again to resume"):
        client.pull("cut")
    state: Path = gateway.state  # type: ignore[attr-defined]
    [partial] = (state / "ollama" / "blobs").glob("*-partial")
    kept = partial.stat().st_size
    assert kept > 0
    assert client.pull("cut").status == "success"
    assert f"bytes={kept}-" in registry.ranges
    assert not list((state / "ollama" / "blobs").glob("*-partial"))
    assert "cut:latest" in [m.model for m in client.list().models]


def test_a_wrong_digest_fails_and_leaves_nothing(client: ollama.Client, gateway: Gateway) -> None:
    state: Path = gateway.state  # type: ignore[attr-defined]
    blobs = state / "ollama" / "blobs"
    before = sorted(p.name for p in blobs.iterdir()) if blobs.is_dir() else []
    with pytest.raises(ollama.ResponseError, match="arrived with another digest"):
        client.pull("bad:latest")
    after = sorted(p.name for p in blobs.iterdir()) if blobs.is_dir() else []
    assert after == before
    assert not (state / "ollama" / "manifests" / "registry.ollama.ai" / "library" / "bad").exists()
    assert "bad:latest" not in [m.model for m in client.list().models]


def test_a_name_that_is_no_model_is_a_404(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError, match="no such model") as err:
        client.pull("nothing:here")
    assert err.value.status_code == 404


def test_delete_removes_the_manifest_its_own_blobs_and_the_converted_folder(
    client: ollama.Client, gateway: Gateway
) -> None:
    state: Path = gateway.state  # type: ignore[attr-defined]
    blobs = state / "ollama" / "blobs"
    client.chat(
        model="tiny", messages=[{"role": "user", "content": "hi"}], options={"num_predict": 1}
    )
    before = {p.name for p in blobs.iterdir()}
    converted = {p.name for p in (state / "gguf").iterdir() if p.is_dir()}
    tiny = state / "ollama" / "manifests" / "registry.ollama.ai" / "library" / "tiny"
    tiny_digests = {
        layer["digest"].replace(":", "-")
        for layer in json.loads((tiny / "latest").read_text())["layers"]
    }
    assert tiny_digests <= before

    client.delete("tiny:latest")
    assert "tiny:latest" not in [m.model for m in client.list().models]
    assert not tiny.exists()
    after = {p.name for p in blobs.iterdir()}
    assert after == before - tiny_digests  # cut's blobs stay
    gone = {d.removeprefix("sha256-") for d in tiny_digests}
    assert {p.name for p in (state / "gguf").iterdir() if p.is_dir()} == converted - gone
    assert converted & gone  # tiny's converted folder was there, and is no more
    assert "cut:latest" in [m.model for m in client.list().models]
