"""The gateway's side of the fast lm path: prompt-cache and OpenBLAS settings, the
environment workers start with, /health, and taking replies without waiting."""

from __future__ import annotations

import asyncio
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from mlx_gateway.protocol.messages import Chunk, Done, Started
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.supervisor.config import ConfigError, load_config
from mlx_gateway.supervisor.pool.blas import find_openblas, openblas_for, with_preload
from mlx_gateway.supervisor.pool.worker_spec import spec_for

from ..api.fakes import routes_app
from ..fakes import chat, fake_config, start_with_probe

HF_ID = "mlx-community/Qwen3-0.6B-4bit"


def load(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return load_config(path)


# ---------------------------------------------------------------- settings


def test_prompt_cache_settings_reach_the_lm_worker(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        f"""
        models:
          - model_path: {HF_ID}
            prompt_cache_bytes: 1GiB
            prompt_cache_entries: 4
            stream_interval: 0.005
          - model_path: {HF_ID}
            served_model_name: default
        """,
    )
    options = spec_for(config.models[0], "w").options
    assert options["prompt_cache_bytes"] == 1024**3
    assert options["prompt_cache_entries"] == 4
    assert options["stream_interval"] == 0.005  # the worker spaces its messages too
    default = spec_for(config.models[1], "w").options
    assert default["prompt_cache_bytes"] == 512 * 1024**2
    assert default["prompt_cache_entries"] == 32
    assert default["stream_interval"] == 0.02


def test_mlx_openai_server_prompt_cache_keys_are_used(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        f"""
        models:
          - model_path: {HF_ID}
            prompt_cache_size: 3
            prompt_cache_max_bytes: 1000000
        """,
    )
    assert config.models[0].prompt_cache_entries == 3
    assert config.models[0].prompt_cache_bytes == 1_000_000


@pytest.mark.parametrize(
    ("value", "words"),
    [("lots", "not a size"), (-5, "≥ 0"), ("true", "expected")],
)
def test_a_bad_prompt_cache_size_names_the_key(tmp_path: Path, value: object, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, f"models:\n  - model_path: {HF_ID}\n    prompt_cache_bytes: {value}\n")
    assert "prompt_cache_bytes" in info.value.message
    assert words in info.value.message
    assert info.value.line == 3


def test_negative_entry_cap_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, f"models:\n  - model_path: {HF_ID}\n    prompt_cache_entries: -1\n")
    assert "prompt_cache_entries" in info.value.message


def test_openblas_switch_server_and_model(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        f"""
        server:
          preload_openblas: false
        models:
          - model_path: {HF_ID}
          - model_path: {HF_ID}
            served_model_name: again
            preload_openblas: true
        """,
    )
    assert config.server.preload_openblas is False
    assert config.models[0].preload_openblas is None
    assert config.models[1].preload_openblas is True


# ---------------------------------------------------------------- OpenBLAS


def test_with_preload_puts_the_library_first_once() -> None:
    lib = "/usr/lib/libopenblas.so.0"
    assert with_preload({}, lib) == {"LD_PRELOAD": lib, "OPENBLAS_THREAD_TIMEOUT": "4"}
    env = with_preload({"LD_PRELOAD": f"/a.so:{lib} /b.so", "X": "1"}, lib)
    assert env == {"LD_PRELOAD": f"{lib} /a.so /b.so", "X": "1", "OPENBLAS_THREAD_TIMEOUT": "4"}
    mine = with_preload({"OPENBLAS_THREAD_TIMEOUT": "20"}, lib)
    assert mine["OPENBLAS_THREAD_TIMEOUT"] == "20"  # a chosen timeout is kept


def test_openblas_for_respects_the_switch_and_worker_env() -> None:
    assert openblas_for(False, {}) is None
    assert openblas_for(True, {"LD_PRELOAD": "/mine.so"}) is None  # theirs wins
    assert openblas_for(True, {}) == find_openblas()


def test_find_openblas_finds_a_real_file_on_linux() -> None:
    found = find_openblas()
    if not sys.platform.startswith("linux"):
        assert found is None
    elif found is not None:
        assert Path(found).is_file() and "openblas" in found


def env_probe(out: Path) -> Any:
    """A worker command that records its LD_PRELOAD and exits (the start fails)."""

    def command(spec: WorkerSpec, endpoint: str) -> list[str]:
        code = (
            "import os, pathlib; "
            f"pathlib.Path({str(out)!r}).write_text(os.environ.get('LD_PRELOAD', '-'))"
        )
        return [sys.executable, "-c", code]

    return command


@pytest.mark.parametrize(
    ("server", "model", "expected"),
    [
        ({}, {}, "found"),
        ({"preload_openblas": False}, {}, "-"),
        ({"preload_openblas": False}, {"preload_openblas": True}, "found"),
        ({}, {"preload_openblas": False}, "-"),
        ({}, {"worker_env": {"LD_PRELOAD": "/mine.so"}}, "/mine.so"),
    ],
)
async def test_workers_start_with_openblas_preloaded(
    tmp_path: Path, server: dict[str, Any], model: dict[str, Any], expected: str
) -> None:
    out = tmp_path / "ld_preload.txt"
    config = fake_config({"model_path": "fake/ok", **model}, **server)
    await start_with_probe(config, env_probe(out))
    if expected == "found":
        expected = find_openblas() or "-"
    assert out.read_text() == expected


async def test_health_tells_the_blas(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/ok"})
    app = routes_app(registry)
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
        body = (await http.get("/health")).json()
    assert body["blas"] == {"preload_openblas": True, "openblas": find_openblas()}
    assert body["models"]["fake/ok"]["blas"] is None  # not started: nothing measured yet


# ---------------------------------------------------------------- replies


@pytest.mark.slow
async def test_replies_that_arrived_are_taken_without_waiting(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/ok"})
    handle = registry.resolve("fake/ok")
    async with handle.session() as session:
        stream = session.generate(chat("one two three four five"))
        assert stream.take_ready() is None  # nothing sent before the first iteration
        assert isinstance(await anext(stream), Started)
        taken: list[Any] = []
        deadline = time.monotonic() + 30
        while not (taken and isinstance(taken[-1], Done)):
            assert time.monotonic() < deadline, "the worker never finished"
            reply = stream.take_ready()
            if reply is None:
                await asyncio.sleep(0.01)
            else:
                taken.append(reply)
        assert "".join(r.text for r in taken if isinstance(r, Chunk)) == "one two three four five "
        assert stream.take_ready() is None
        with pytest.raises(StopAsyncIteration):
            await anext(stream)
    assert handle.inflight == 0
