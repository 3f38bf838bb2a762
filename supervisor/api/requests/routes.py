"""``GET /v1/requests`` and ``POST /v1/requests/{id}/cancel``: the requests the
gateway is answering now, and a way to stop one (admin endpoints).

Each HTTP request has a record (:mod:`...recorder`) from its arrival to the end of
its response: its id (the ``X-Request-Id`` of its answer, the chat completion's or
message's ``id`` where it has one), model, path, client address, age, phase and
tokens so far. A request whose model is loading shows ``loading`` instead of
``queued``. Cancelling stops it on the worker at its next step; a generation under
way ends with its API's error (``request_cancelled``: a stream's error event and
end), anything else as a client's disconnect would (its task is cancelled).
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.replies import JSONResponse
from mlx_gateway.supervisor.recorder import RequestRecord


def _phase(record: RequestRecord, states: dict[str, str]) -> str:
    if record.phase == "queued" and states.get(record.model or "") == "loading":
        return "loading"
    return record.phase


def describe(record: RequestRecord, now: float, states: dict[str, str]) -> dict[str, Any]:
    return {
        "id": record.id,
        "model": record.model,
        "path": record.path,
        "client": record.client,
        "age": round(now - record.started, 3),
        "phase": _phase(record, states),
        "prompt_tokens": record.prompt_tokens,
        "cached_tokens": record.cached_tokens,
        "completion_tokens": record.completion_tokens,
        "cache_miss": _cache_miss(record),
    }


def _cache_miss(record: RequestRecord) -> dict[str, Any] | None:
    """Where a turn's prompt left the model's closest recent prompt: the part that
    differs first (``system``, ``tools``, ``messages[i]``) and, once the worker said
    how much it read from the cache, the token it left at."""
    miss = record.cache_miss
    if miss is None:
        return None
    token = record.cached_tokens if record.outcome is not None else None
    return {"part": miss.part, "shared_parts": miss.shared_parts, "token": token}


def _live(request: Request) -> list[RequestRecord]:
    """The running requests, these admin calls themselves left out."""
    return [
        r
        for r in gateway_of(request).recorder.live.values()
        if not r.path.startswith("/v1/requests")
    ]


async def list_requests(request: Request) -> Response:
    """``{"object": "list", "data": [...]}``: the requests in flight or queued,
    oldest first."""
    states = {h.name: h.status().state for h in gateway_of(request).registry.handles}
    now = time.monotonic()
    records = sorted(_live(request), key=lambda r: r.started)
    return JSONResponse({"object": "list", "data": [describe(r, now, states) for r in records]})


async def cancel_request(request: Request) -> Response:
    """End the request ``id`` as a client's disconnect would; 404 when no request
    with that id runs (it may have ended)."""
    wanted = request.path_params["request_id"]
    record = next((r for r in _live(request) if r.id == wanted), None)
    if record is None or record.task is None or record.task.done():
        raise GatewayError(
            f"no request '{wanted}' is running (it may have ended); GET /v1/requests "
            "lists the running ones",
            status=404,
            type="invalid_request_error",
            param="request_id",
            code="request_not_found",
        )
    reason = GatewayError(
        f"the request was cancelled by an admin (POST /v1/requests/{wanted}/cancel)",
        status=503,
        code="request_cancelled",
    )
    # A generation under way ends with its API's error (a stream: an error event and
    # its end); anything else (waiting for a slot, other endpoints) as a disconnect.
    ended = [abort(reason) for abort in record.aborts]
    if not any(ended):
        record.task.cancel(reason.message)
    return JSONResponse({"id": wanted, "object": "request.cancelled", "cancelled": True})
