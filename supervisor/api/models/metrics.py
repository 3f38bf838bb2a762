"""``GET /metrics``: Prometheus text format.

Request figures (status codes, tokens, TTFT, durations) come from the app's
:class:`~.recorder.Recorder`; model figures (state, in flight, queue, memory,
crashes, evictions) are read from the worker handles at scrape time; gateway
figures (open connections, memory) from the gateway process itself.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

import psutil
from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.api.models.routes import memory_summary
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.metrics import CONTENT_TYPE, counter_of, gauge
from mlx_gateway.supervisor.peers.directory import Peer
from mlx_gateway.supervisor.pool.state import WorkerState
from mlx_gateway.supervisor.recorder import Recorder

STATES = tuple(dict.fromkeys(state.public for state in WorkerState))
"""Every public state name, once each (``unloaded``, ``loading``, ``ready``…)."""

_PROCESS = psutil.Process(os.getpid())


def model_lines(handles: Iterable[Any]) -> Iterator[str]:
    """The per-model families read from the worker handles."""
    handles = list(handles)

    def each(read: Any) -> Iterator[tuple[tuple[str, ...], float]]:
        for h in handles:
            value = read(h)
            if value is not None:
                yield (h.name,), float(value)

    yield from gauge(
        "mlx_gateway_model_state",
        "1 for the state the model's worker is in, 0 for the others.",
        ("model", "state"),
        (((h.name, s), float(h.state.public == s)) for h in handles for s in STATES),
    )
    yield from gauge(
        "mlx_gateway_model_inflight",
        "Requests holding the model now (waiting for it or being answered).",
        ("model",),
        each(lambda h: h.inflight),
    )
    yield from gauge(
        "mlx_gateway_model_queue_depth",
        "Requests waiting in the gateway for the model to load or for a free slot.",
        ("model",),
        each(lambda h: h.waiting),
    )
    yield from gauge(
        "mlx_gateway_model_memory_bytes",
        "Memory the model's worker last reported: rss, MLX active and MLX cache, and "
        "the KV cache of its running requests (kv_active) and of its prompt cache "
        "(kv_kept), and the KV bytes it admits requests against (kv_limit).",
        ("model", "kind"),
        (
            ((h.name, kind), float(getattr(h.memory, kind)))
            for h in handles
            if h.memory is not None
            for kind in ("rss", "mlx_active", "mlx_cache", "kv_active", "kv_kept", "kv_limit")
        ),
    )
    yield from gauge(
        "mlx_gateway_model_memory_need_bytes",
        "The model's memory need as the budget counts it, by source: measured "
        "(its worker reported it), configured (memory_estimate) or estimated.",
        ("model", "source"),
        (
            ((h.name, status.memory_need_source), float(status.memory_need))
            for h in handles
            if (status := h.status()).memory_need
        ),
    )
    yield from gauge(
        "mlx_gateway_model_prefill_tokens_per_second",
        "Prompt tokens per second the model's worker last measured reading a long "
        "prompt (language models, once one was read).",
        ("model",),
        (((h.name,), tps) for h in handles if (tps := h.status().prefill_tps)),
    )
    yield from gauge(
        "mlx_gateway_model_last_used_timestamp_seconds",
        "Unix time at which the model's last request finished.",
        ("model",),
        each(lambda h: h.last_used_wall),
    )
    yield from counter_of(
        "mlx_gateway_model_crashes_total",
        "Worker exits the gateway did not ask for (the next request restarts it).",
        ("model",),
        each(lambda h: h.crashes),
    )
    yield from counter_of(
        "mlx_gateway_model_stalls_total",
        "Workers killed because a step made no progress past step_timeout while the "
        "process lived, by the step's kind (decode, prefill, checks…).",
        ("model", "step"),
        (((h.name, phase), float(n)) for h in handles for phase, n in h.stalls.items()),
    )
    yield from gauge(
        "mlx_gateway_model_step_stalled_seconds",
        "Seconds the worker's current step has made no progress, as of its last "
        "heartbeat (0 between steps).",
        ("model",),
        each(lambda h: h.step.stalled_for if h.step is not None else None),
    )
    yield from counter_of(
        "mlx_gateway_model_evictions_total",
        "Times the model was stopped to make room for another one.",
        ("model",),
        each(lambda h: h.evictions),
    )


def peer_lines(peers: Iterable[Peer]) -> Iterator[str]:
    """The peer gateways (``server.peers``): up or down, their models, this
    gateway's requests to them."""
    peers = list(peers)
    if not peers:
        return
    yield from gauge(
        "mlx_gateway_peer_up",
        "1 while the peer answers its health checks and requests, 0 while it is down.",
        ("peer",),
        (((p.name,), float(p.up)) for p in peers),
    )
    yield from gauge(
        "mlx_gateway_peer_models",
        "Models the peer listed at its last successful health check.",
        ("peer",),
        (((p.name,), float(len(p.models))) for p in peers),
    )
    yield from gauge(
        "mlx_gateway_peer_inflight",
        "Requests this gateway is forwarding to the peer now.",
        ("peer",),
        (((p.name,), float(p.inflight)) for p in peers),
    )
    yield from counter_of(
        "mlx_gateway_peer_requests_total",
        "Requests this gateway forwarded to the peer, by outcome: answered (relayed, "
        "whatever the status) or failed (unreachable, or passed to another replica).",
        ("peer", "outcome"),
        (
            ((p.name, outcome), float(count))
            for p in peers
            for outcome, count in (("answered", p.forwarded), ("failed", p.failed))
        ),
    )


def budget_lines(summary: dict[str, int] | None) -> Iterator[str]:
    """The memory budget: the whole, what resident models reserve, what is free."""
    if summary is None:
        return
    for key, help_text in (
        ("budget", "The memory budget all workers together may use (server.memory_budget)."),
        ("reserved", "Memory needs of the models resident now or about to start."),
        ("free", "Budget minus reserved (negative when over the budget)."),
    ):
        yield from gauge(
            f"mlx_gateway_memory_{key}_bytes", help_text, (), [((), float(summary[key]))]
        )


def open_connections(port: int | None) -> int | None:
    """Established TCP connections to the gateway's port (``None`` when unknown)."""
    if port is None:
        return None
    try:
        conns = _PROCESS.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    return sum(
        1 for c in conns if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port
    )


def gateway_lines(recorder: Recorder, port: int | None) -> Iterator[str]:
    """The gateway's own families."""
    connections = open_connections(port)
    yield from gauge(
        "mlx_gateway_open_connections",
        "Established TCP connections to the gateway's HTTP port.",
        (),
        [((), float(connections))] if connections is not None else [],
    )
    yield from gauge(
        "mlx_gateway_http_requests_in_flight",
        "HTTP requests being answered now (streams included).",
        (),
        [((), float(recorder.in_flight))],
    )
    with _PROCESS.oneshot():
        rss = _PROCESS.memory_info().rss
        started = _PROCESS.create_time()
    yield from gauge(
        "process_resident_memory_bytes", "Resident memory of the gateway process.", (), [((), rss)]
    )
    yield from gauge(
        "process_start_time_seconds",
        "Unix time at which the gateway process started.",
        (),
        [((), started)],
    )
    yield from gauge(
        "mlx_gateway_uptime_seconds",
        "Seconds since the gateway process started.",
        (),
        [((), max(0.0, time.time() - started))],
    )


def render(
    recorder: Recorder,
    handles: Iterable[Any],
    port: int | None,
    memory: dict[str, int] | None = None,
    peers: Iterable[Peer] = (),
) -> str:
    """The whole exposition."""
    request_lines = (line for family in recorder.families() for line in family.render())
    lines = itertools.chain(
        model_lines(handles),
        budget_lines(memory),
        peer_lines(peers),
        request_lines,
        gateway_lines(recorder, port),
    )
    return "\n".join(lines) + "\n"


async def metrics(request: Request) -> Response:
    """Every metric in Prometheus text format (an admin endpoint)."""
    gateway = gateway_of(request)
    body = render(
        gateway.recorder,
        gateway.registry.handles,
        gateway.config.server.port,
        memory_summary(gateway.registry),
        gateway.peers.peers,
    )
    return Response(body, media_type=CONTENT_TYPE)
