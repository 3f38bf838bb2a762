"""``GET /metrics`` through the real app and a fake worker process, read back with
the reference parser of the Prometheus text format (prometheus_client)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.metrics import Counter, Histogram, escape_label, format_value

from ...waiting import until
from ..fakes import fake_command, fake_config, worker_output

pytestmark = pytest.mark.slow

OK = "fake/ok"
FAILING = "fake/load-error"


@pytest.fixture
async def app() -> AsyncIterator[Starlette]:
    app = create_app(fake_config({"model_path": OK}, {"model_path": FAILING}), command=fake_command)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        yield client


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of an exposition, keyed by name and label set."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(all_samples: dict, name: str, **labels: str) -> float:
    return all_samples[(name, frozenset(labels.items()))]


def chat(text: str, **extra: object) -> dict[str, object]:
    return {"model": OK, "messages": [{"role": "user", "content": text}], **extra}


async def test_metrics_after_traffic(http: httpx.AsyncClient, app: Starlette) -> None:
    # Two answers (one streamed), a 400, a 404, a 503 (load failure).
    assert (await http.post("/v1/chat/completions", json=chat("a b c"))).status_code == 200
    r = await http.post("/v1/chat/completions", json=chat("d e f g", stream=True, max_tokens=2))
    assert r.status_code == 200
    assert (await http.post("/v1/chat/completions", json=chat("x", n=17))).status_code == 400
    r = await http.post("/v1/completions", json={"model": "nope", "prompt": "x"})
    assert r.status_code == 404
    r = await http.post("/v1/completions", json={"model": FAILING, "prompt": "x"})
    assert r.status_code == 503

    r = await http.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    got = samples(r.text)

    assert value(got, "mlx_gateway_model_state", model=OK, state="ready") == 1
    assert value(got, "mlx_gateway_model_state", model=OK, state="unloaded") == 0
    assert value(got, "mlx_gateway_model_state", model=FAILING, state="failed") == 1
    assert value(got, "mlx_gateway_model_inflight", model=OK) == 0
    assert value(got, "mlx_gateway_model_queue_depth", model=OK) == 0
    assert value(got, "mlx_gateway_model_crashes_total", model=FAILING) >= 1
    assert value(got, "mlx_gateway_model_evictions_total", model=OK) == 0
    # The 400 was refused before a model was chosen: counted by route only.
    assert value(got, "mlx_gateway_requests_total", model=OK, status="200") == 2
    assert value(got, "mlx_gateway_requests_total", model=FAILING, status="503") == 1
    assert ("mlx_gateway_requests_total", frozenset({("model", OK), ("status", "400")})) not in got
    route = "/v1/chat/completions"
    assert value(got, "mlx_gateway_http_requests_total", route=route, status="400") == 1
    assert value(got, "mlx_gateway_http_requests_total", route="/v1/completions", status="404") == 1
    # Tokens: the fake worker's usage is (words in, words out): (3, 3) and (4, 2).
    assert value(got, "mlx_gateway_prompt_tokens_total", model=OK) == 7
    assert value(got, "mlx_gateway_completion_tokens_total", model=OK) == 5
    assert value(got, "mlx_gateway_request_outcomes_total", model=OK, outcome="stop") == 1
    assert value(got, "mlx_gateway_request_outcomes_total", model=OK, outcome="length") == 1
    # Histograms: both answers observed; the first token came before the end.
    assert value(got, "mlx_gateway_time_to_first_token_seconds_count", model=OK) == 2
    assert value(got, "mlx_gateway_request_duration_seconds_count", model=OK) == 2
    ttft = value(got, "mlx_gateway_time_to_first_token_seconds_sum", model=OK)
    duration = value(got, "mlx_gateway_request_duration_seconds_sum", model=OK)
    assert 0 < ttft < duration
    assert value(got, "mlx_gateway_request_duration_seconds_bucket", model=OK, le="+Inf") == 2
    # Memory is what the worker last reported (in Ready or a heartbeat).
    memory = gateway_of(app).registry.resolve(OK).memory
    if memory is not None:
        assert value(got, "mlx_gateway_model_memory_bytes", model=OK, kind="rss") == memory.rss
        assert value(got, "mlx_gateway_model_memory_bytes", model=OK, kind="mlx_active") == (
            memory.mlx_active
        )
    # The scrape itself is in flight while it renders.
    assert value(got, "mlx_gateway_http_requests_in_flight") == 1
    assert value(got, "process_resident_memory_bytes") > 10 * 2**20


async def test_disconnect_and_crash_outcomes(http: httpx.AsyncClient, app: Starlette) -> None:
    r = await http.post("/v1/chat/completions", json=chat("crash a b c d e", stream=True))
    assert r.status_code == 200 and b"worker_crashed" in r.content
    got = samples((await http.get("/metrics")).text)
    assert value(got, "mlx_gateway_request_outcomes_total", model=OK, outcome="error") == 1
    assert value(got, "mlx_gateway_model_crashes_total", model=OK) == 1
    # Streamed before the crash: 3 chunks of one token each.
    assert value(got, "mlx_gateway_completion_tokens_total", model=OK) == 3

    handle = gateway_of(app).registry.resolve(OK)
    hanging = sum(line.startswith("hanging ") for line in worker_output(handle))
    task = asyncio.create_task(
        http.post("/v1/chat/completions", json=chat("hang here", stream=True))
    )
    # the worker holds it (not only the gateway)
    await until(
        lambda: sum(line.startswith("hanging ") for line in worker_output(handle)) > hanging,
        30,
        lambda: worker_output(handle)[-5:],
    )
    got = samples((await http.get("/metrics")).text)
    assert value(got, "mlx_gateway_model_inflight", model=OK) == 1
    task.cancel()  # the client leaves
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(200):
        if not handle.inflight:
            break
        await asyncio.sleep(0.01)
    got = samples((await http.get("/metrics")).text)
    assert value(got, "mlx_gateway_request_outcomes_total", model=OK, outcome="client_left") == 1


def test_exposition_format() -> None:
    counter = Counter("c_total", "help with \\ and\nnewline", ("a",))
    counter.inc('quote " back \\ nl \n')
    counter.inc("plain", amount=2.5)
    hist = Histogram("h_seconds", "h", (0.1, 1.0), ("m",))
    for v in (0.05, 0.1, 0.5, 7.0):
        hist.observe("x", value=v)
    text = "\n".join([*counter.render(), *hist.render()]) + "\n"
    got = samples(text)
    assert value(got, "c_total", a='quote " back \\ nl \n') == 1
    assert value(got, "c_total", a="plain") == 2.5
    assert value(got, "h_seconds_bucket", m="x", le="0.1") == 2  # le is inclusive
    assert value(got, "h_seconds_bucket", m="x", le="1.0") == 3
    assert value(got, "h_seconds_bucket", m="x", le="+Inf") == 4
    assert value(got, "h_seconds_count", m="x") == 4
    assert value(got, "h_seconds_sum", m="x") == pytest.approx(7.65)
    assert escape_label('a"b') == 'a\\"b'
    assert [format_value(v) for v in (3.0, 0.25, float("inf"), float("nan"))] == [
        "3", "0.25", "+Inf", "NaN"
    ]  # fmt: skip


async def test_embeddings_are_counted_per_model(tiny_bert_path: Path) -> None:
    """An endpoint outside the chat/completions code (the real embeddings worker on
    a tiny BERT) notes its model and tokens too."""
    from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
    from mlx_gateway.supervisor.pool.spawn import worker_command

    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=1.0),
        models=[
            model_entry(
                model_path=str(tiny_bert_path), served_model_name="bert", model_type="embeddings"
            )
        ],
    )
    app = create_app(config, command=worker_command)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=60) as http:
            r = await http.post("/v1/embeddings", json={"model": "bert", "input": ["a b", "c"]})
            assert r.status_code == 200, r.text
            used = r.json()["usage"]["prompt_tokens"]
            got = samples((await http.get("/metrics")).text)
    assert value(got, "mlx_gateway_requests_total", model="bert", status="200") == 1
    assert value(got, "mlx_gateway_prompt_tokens_total", model="bert") == used > 0
    assert value(got, "mlx_gateway_request_outcomes_total", model="bert", outcome="stop") == 1
    assert value(got, "mlx_gateway_request_duration_seconds_count", model="bert") == 1
