"""Ollama's reply shapes: errors as ``{"error": "..."}``, NDJSON streams, the
timestamps and the durations (nanoseconds) clients show speeds from."""

from __future__ import annotations

import datetime
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from starlette.responses import StreamingResponse

from mlx_gateway.protocol.messages import Usage
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.http import (
    JSONResponse,
    errors_shaped_by,
    ollama_error_body,
)

NDJSON = "application/x-ndjson"


def now_iso() -> str:
    """The current time as Ollama writes ``created_at`` (RFC 3339, UTC)."""
    return datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")


FOREVER = "2318-01-01T00:00:00Z"
"""A time too far ahead to matter (``expires_at`` of a model kept without limit),
as Ollama shows a model kept with ``keep_alive: -1``."""


def iso(timestamp: float) -> str:
    """A Unix time in ``created_at``'s form (:data:`FOREVER` beyond what dates hold:
    a client may ask for a lifetime of 1e300 seconds)."""
    try:
        moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return FOREVER
    if moment.year > 2317:
        return FOREVER
    return moment.isoformat().replace("+00:00", "Z")


def ollama_error(exc: GatewayError) -> JSONResponse:
    """``exc`` in Ollama's error shape."""
    return JSONResponse(ollama_error_body(exc), status_code=exc.status, headers=exc.headers)


ollama_errors = errors_shaped_by(ollama_error)
"""Render the :class:`GatewayError`\\ s of ``handler`` the Ollama way."""


def line(obj: Any) -> bytes:
    """One NDJSON line."""
    return msgspec.json.encode(obj) + b"\n"


def error_line(exc: GatewayError) -> bytes:
    """The last line of a stream that failed after it started."""
    return line(ollama_error_body(exc))


def ndjson(lines: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(lines, media_type=NDJSON)


def arguments_object(arguments: str) -> Any:
    """A tool call's JSON arguments as the object Ollama sends (the text, if it is
    not JSON, so nothing the model wrote is lost)."""
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


class Clock:
    """The durations of one request, in nanoseconds: ``load_duration`` until the
    worker accepted it (the load, if it had to start, and any wait for a slot),
    ``prompt_eval_duration`` until the first output, ``eval_duration`` after."""

    def __init__(self) -> None:
        self.begun = time.monotonic_ns()
        self.accepted: int | None = None
        self.first: int | None = None

    def mark_accepted(self) -> None:
        self.accepted = time.monotonic_ns()

    def mark_output(self) -> None:
        if self.first is None:
            self.first = time.monotonic_ns()

    def durations(self, usage: Usage | None) -> dict[str, int]:
        end = time.monotonic_ns()
        accepted = self.accepted or end
        first = self.first or end
        out = {
            "total_duration": end - self.begun,
            "load_duration": accepted - self.begun,
            "prompt_eval_count": usage.prompt_tokens if usage else 0,
            "prompt_eval_duration": max(first - accepted, 0),
            "eval_count": usage.completion_tokens if usage else 0,
            "eval_duration": max(end - first, 0),
        }
        return out


def done_reason(finish: str) -> str:
    """Ollama's ``done_reason``: ``stop`` (tool calls too) or ``length``."""
    return "length" if finish == "length" else "stop"
