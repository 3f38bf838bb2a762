"""A generation left before its end (the client hung up or timed out) leaves one
log line saying where it was; one that ran to its end or failed does not. Real TCP,
the OpenAI SDK as the client, fake workers (the real protocol)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from mlx_gateway.supervisor.logs import split_model
from tests.e2e.gateway import wait_until

from ..live import LiveGateway

MODEL = "fake/ok"
LOGGER = "mlx_gateway.requests"


@pytest.fixture(scope="module")
def gateway() -> Iterator[LiveGateway]:
    with LiveGateway({"model_path": MODEL}, stream_keepalive=0.2) as gw:
        yield gw


def left(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_a_client_that_leaves_during_the_prefill(
    gateway: LiveGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    prompt = [{"role": "user", "content": "prefill 4 a b"}]
    body = {"model": MODEL, "stream": True, "messages": prompt}
    with (
        httpx.Client(timeout=30) as http,
        http.stream("POST", f"{gateway.url}/v1/chat/completions", json=body) as response,
    ):
        lines = response.iter_lines()
        # The fake worker reports half of the prompt's 4 words read halfway: wait for it.
        assert any(line.startswith(": prefill 2/4") for line in lines)
    handle = gateway.registry.resolve(MODEL)
    assert wait_until(lambda: handle.inflight == 0, 10)
    (line,) = left(caplog)
    assert line.startswith(f"[{MODEL}] chatcmpl-") and "left at prefill 2/4 tokens" in line
    assert line.endswith("cancelled on the worker")
    (record,) = [r for r in caplog.records if r.name == LOGGER]
    assert split_model(record)[0] == MODEL  # the JSON log's "model" field


def test_a_client_that_leaves_while_tokens_stream(
    gateway: LiveGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    words = " ".join(["word"] * 500)  # echoed one word per step: seconds of output
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": words}], stream=True
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    stream.close()
    handle = gateway.registry.resolve(MODEL)
    assert wait_until(lambda: handle.inflight == 0, 10)
    (line,) = left(caplog)
    assert "left after " in line and " output tokens, " in line


def test_nothing_is_logged_for_an_answer_read_to_its_end(
    gateway: LiveGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "say done"}]
    )
    assert reply.choices[0].message.content == "done"
    time.sleep(0.2)  # not a wait: a moment in which nothing may be logged
    assert left(caplog) == []
