"""SIGTERM to the real ``mlx-gateway launch`` process while streams run longer than
``shutdown_grace``: each must end with its error event and ``data: [DONE]`` before
the connection closes, never be cut mid-body.

The workers are the fake worker (tests/supervisor/processes/fake_worker.py), started by the
gateway's own spawn code through the model's ``python:`` key: a tiny script in its
place runs the fake worker with the arguments a real worker gets. It stops as the
real serve loop does (running work may finish within the grace, then it is ended
as cancelled), and its ``hang`` request outlasts any grace.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from ..supervisor.fakes import FAKE_WORKER
from .gateway import Gateway, wait_until

pytestmark = pytest.mark.slow


def fake_interpreter(tmp_path: Path) -> str:
    """An executable standing in for a model's ``python``: it drops the
    ``-m mlx_gateway.workers`` the gateway passes and runs the fake worker."""
    script = tmp_path / "fake-python"
    script.write_text(f'#!/bin/sh\nshift 2\nexec "{sys.executable}" "{FAKE_WORKER}" "$@"\n')
    script.chmod(0o755)
    return str(script)


def test_sigterm_lets_long_streams_end_with_an_error_and_done(tmp_path: Path) -> None:
    model = {"model_path": "fake/ok", "served_model_name": "m", "max_concurrency": 4}
    gw = Gateway(tmp_path, [{**model, "python": fake_interpreter(tmp_path)}], shutdown_grace=1)
    lines: dict[int, list[str]] = {}
    failures: list[BaseException] = []

    def stream(i: int) -> None:
        body = {"model": "m", "messages": [{"role": "user", "content": "hang"}], "stream": True}
        try:
            with httpx.stream(
                "POST", f"{gw.base_url}/v1/chat/completions", json=body, timeout=60
            ) as response:
                assert response.status_code == 200
                lines[i] = [line for line in response.iter_lines() if line.startswith("data: ")]
        except BaseException as exc:  # a cut connection shows here
            failures.append(exc)

    readers = [threading.Thread(target=stream, args=(i,)) for i in range(3)]
    try:
        for reader in readers:
            reader.start()
        assert wait_until(lambda: gw.model("m")["inflight"] == 3, timeout=30), gw.log()
        started = time.monotonic()
        gw.proc.send_signal(signal.SIGTERM)
        for reader in readers:
            reader.join(60)
        took = time.monotonic() - started
    finally:
        code = gw.stop()
    assert not failures, (failures, gw.log())
    assert code == 0
    assert 1.0 <= took < 15, took  # the grace was given, and the end came soon after
    assert sorted(lines) == [0, 1, 2]
    for events in lines.values():
        assert events[-1] == "data: [DONE]", events
        error = json.loads(events[-2].removeprefix("data: "))["error"]
        assert "the gateway is shutting down" in error["message"], error
