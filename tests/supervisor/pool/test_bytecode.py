"""The workers' bytecode cache: when a worker would compile its imports at every
start (``PYTHONDONTWRITEBYTECODE``, read-only packages), the gateway points
``PYTHONPYCACHEPREFIX`` at its own cache folder; otherwise it changes nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.supervisor.config import ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.pool.bytecode import NO_WRITE, PREFIX, with_bytecode_cache
from mlx_gateway.supervisor.pool.worker_spec import worker_environment

from ..fakes import fake_config, start_with_probe

FOLDER = Path("/cache/bytecode")


@pytest.mark.parametrize(
    ("env", "worker_env", "writable", "expected"),
    [
        ({NO_WRITE: "1"}, {}, True, {PREFIX: str(FOLDER)}),  # the variable is dropped
        ({}, {}, False, {PREFIX: str(FOLDER)}),  # read-only packages
        ({}, {}, True, {}),  # bytecode is written as usual: nothing to do
        ({NO_WRITE: ""}, {}, True, {NO_WRITE: ""}),  # empty: Python writes bytecode
        ({NO_WRITE: "1", PREFIX: "/mine"}, {}, True, {NO_WRITE: "1", PREFIX: "/mine"}),
        ({NO_WRITE: "1"}, {NO_WRITE: "1"}, True, {NO_WRITE: "1"}),  # the model's choice
        ({}, {PREFIX: "/theirs"}, False, {}),
    ],
)
def test_when_the_cache_is_used(
    env: dict[str, str], worker_env: dict[str, str], writable: bool, expected: dict[str, str]
) -> None:
    assert with_bytecode_cache({"X": "y", **env}, worker_env, FOLDER, writable) == {
        "X": "y",
        **expected,
    }


def test_the_switch_and_another_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NO_WRITE, "1")
    monkeypatch.delenv(PREFIX, raising=False)
    model = model_entry(model_path="fake/ok", served_model_name="m")
    on = worker_environment(model, ServerConfig(preload_openblas=False), {})
    assert NO_WRITE not in on and on[PREFIX].endswith("bytecode")
    off = worker_environment(model, ServerConfig(bytecode_cache=False), {})
    assert off[NO_WRITE] == "1" and PREFIX not in off
    # Another interpreter's packages are not checked: only the variable decides.
    monkeypatch.delenv(NO_WRITE)
    other = model_entry(model_path="fake/ok", served_model_name="o", python="/opt/py/bin/python")
    assert PREFIX not in worker_environment(other, ServerConfig(), {})


async def test_a_started_worker_writes_its_bytecode_to_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real worker process started by the gateway with ``PYTHONDONTWRITEBYTECODE``
    set: its imports are compiled into the gateway's cache folder."""
    monkeypatch.setenv("MLX_GATEWAY_CACHE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv(NO_WRITE, "1")
    monkeypatch.delenv(PREFIX, raising=False)
    seen = tmp_path / "seen.json"

    def command(spec: WorkerSpec, endpoint: str) -> list[str]:
        # Imports one of our modules (not imported yet by a bare interpreter), records
        # what it saw, and exits: the start fails, which this test does not mind.
        code = (
            "import json, os, sys, pathlib, mlx_gateway.protocol.kinds; "
            f"pathlib.Path({str(seen)!r}).write_text(json.dumps("
            "[sys.pycache_prefix, sys.dont_write_bytecode]))"
        )
        return [sys.executable, "-c", code]

    await start_with_probe(fake_config({"model_path": "fake/ok"}), command)
    folder = tmp_path / "state" / "bytecode"
    assert json.loads(seen.read_text()) == [str(folder), False]
    import mlx_gateway.protocol.kinds as kinds

    source = Path(kinds.__file__).resolve()
    compiled = folder / source.parent.relative_to(source.anchor) / "kinds.cpython-{}{}.pyc"
    assert Path(str(compiled).format(*sys.version_info[:2])).is_file()
