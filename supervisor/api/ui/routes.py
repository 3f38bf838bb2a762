"""``/ui``: the page and its files, ``/ui/stats`` (per-model counters) and
``/ui/logs`` (recent and live log lines as SSE).

The page and its static files are open (they hold no data); everything the page
shows comes from API calls made with the key the user types into it, so the API's
keys apply as they are: ``/ui/stats`` needs a client key, ``/ui/logs`` and the
load/unload/pin buttons need the admin key (see :mod:`...http.auth`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.log_hub import writing
from mlx_gateway.supervisor.http.replies import JSONResponse

STATIC = resources.files(__package__).joinpath("static")
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
LOG_KEEPALIVE = 15.0
"""Seconds between SSE comments on a quiet log stream (proxies close silent ones)."""


class NotFound(GatewayError):
    status = 404
    type = "not_found_error"


def _file(name: str) -> Response:
    suffix = name[name.rfind(".") :] if "." in name else ""
    if "/" in name or name.startswith(".") or suffix not in CONTENT_TYPES:
        raise NotFound(f"no UI file {name!r}")
    path = STATIC.joinpath(name)
    if not path.is_file():
        raise NotFound(f"no UI file {name!r}")
    return Response(
        path.read_bytes(),
        media_type=CONTENT_TYPES[suffix],
        headers={"cache-control": "no-cache", "x-content-type-options": "nosniff"},
    )


async def page(request: Request) -> Response:
    return _file("index.html")


async def static_file(request: Request) -> Response:
    return _file(request.path_params["name"])


async def stats(request: Request) -> Response:
    """Each model's request and token counters since the gateway started, and the
    gateway's clock: the page turns two samples into rates."""
    recorder = gateway_of(request).recorder
    models: dict[str, dict[str, float]] = {}
    for (model, _status), value in recorder.requests.values.items():
        models.setdefault(model, {}).setdefault("requests", 0.0)
        models[model]["requests"] += value
    for counter, key in (
        (recorder.prompt_tokens, "prompt_tokens"),
        (recorder.completion_tokens, "completion_tokens"),
    ):
        for (model,), value in counter.values.items():
            models.setdefault(model, {})[key] = value
    return JSONResponse({"time": time.time(), "models": models})


_encoder = msgspec.json.Encoder()


def _event(entry: dict[str, Any]) -> bytes:
    return b"data: " + _encoder.encode(entry) + b"\n\n"


async def logs(request: Request) -> Response:
    """The recent log lines (``?model=`` keeps one model's), then new ones as they
    come, as ``data: {json}`` SSE events; ``: keep-alive`` comments when quiet."""
    hub = gateway_of(request).log_hub
    model = request.query_params.get("model") or None

    def wanted(entry: dict[str, Any]) -> bool:
        return model is None or entry["model"] == model

    async def stream() -> AsyncIterator[bytes]:
        writing()  # the task that sends these events streams nothing it logs itself
        with hub.subscribe() as queue:
            for entry in list(hub.recent):
                if wanted(entry):
                    yield _event(entry)
            yield b": live\n\n"
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), LOG_KEEPALIVE)
                except TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                if item is None:  # the gateway is shutting down
                    return
                if wanted(item):
                    yield _event(item)

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )
