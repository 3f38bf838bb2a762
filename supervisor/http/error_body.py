"""The error object of an OpenAI-shaped error reply and of a stream's error event."""

from __future__ import annotations

from msgspec import Struct


class ErrorBody(Struct):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorEvent(Struct):
    """The final SSE event of a stream that failed after it started."""

    error: ErrorBody
