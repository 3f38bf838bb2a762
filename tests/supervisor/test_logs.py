"""JSON log lines: every line names its model, the worker's own output included."""

from __future__ import annotations

import io
import json
import logging
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from mlx_gateway.supervisor.logs import JsonFormatter, setup_logging, split_model

from .live import LiveGateway


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    """Records of the ``mlx_gateway`` loggers, formatted as JSON lines into a buffer."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("mlx_gateway")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield out
    logger.removeHandler(handler)
    logger.setLevel(old_level)


def record(msg: str, *args: object, **attrs: object) -> logging.LogRecord:
    rec = logging.LogRecord("mlx_gateway.worker", logging.INFO, __file__, 1, msg, args, None)
    for key, value in attrs.items():
        setattr(rec, key, value)
    return rec


def test_split_model() -> None:
    assert split_model(record("[%s] %s → %s", "org/q]x", "loading", "ready")) == (
        "org/q]x",
        "loading → ready",
    )
    assert split_model(record("%s %s", "[m1]", "worker says hi")) == ("m1", "worker says hi")
    assert split_model(record("plain %s", "x")) == (None, "plain x")
    assert split_model(record("%s %s", "no-brackets", "x")) == (None, "no-brackets x")
    assert split_model(record("anything", model="given")) == ("given", "anything")


def test_json_line_shape() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        rec = record("[%s] failed", "m")
        rec.exc_info = sys.exc_info()
    line = json.loads(JsonFormatter().format(rec))
    assert set(line) == {"ts", "level", "logger", "model", "message", "exc"}
    assert line["level"] == "info" and line["logger"] == "mlx_gateway.worker"
    assert line["model"] == "m" and line["message"] == "failed"
    assert line["ts"].endswith("Z") and "T" in line["ts"]
    assert "ValueError: boom" in line["exc"]


@pytest.mark.slow
def test_worker_output_lines_carry_the_model(json_lines: io.StringIO) -> None:
    """A real gateway with a fake worker: the worker's stdout, relayed by the
    supervisor, comes out as JSON lines whose ``model`` is the served name."""
    with LiveGateway({"model_path": "lab/fake/ok"}) as gw:
        body = {"model": "lab/fake/ok", "messages": [{"role": "user", "content": "hello"}]}
        assert httpx.post(f"{gw.url}/v1/chat/completions", json=body).status_code == 200
        deadline = time.monotonic() + 5
        while "fake worker" not in json_lines.getvalue() and time.monotonic() < deadline:
            time.sleep(0.02)
    lines = [json.loads(line) for line in json_lines.getvalue().splitlines()]
    output = [line for line in lines if line["logger"] == "mlx_gateway.worker.output"]
    assert output, lines
    assert all(line["model"] == "lab/fake/ok" for line in output)
    assert any(line["message"].startswith("fake worker ") for line in output)
    states = [line for line in lines if "→" in line["message"]]
    assert states and all(line["model"] == "lab/fake/ok" for line in states)


def test_setup_logging_json(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        setup_logging("warning", "json")
        logging.getLogger("mlx_gateway.worker").warning("[%s] hello %d", "m", 3)
        logging.getLogger("mlx_gateway.worker").info("[%s] not shown", "m")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    [line] = capsys.readouterr().err.splitlines()
    assert json.loads(line)["message"] == "hello 3"
