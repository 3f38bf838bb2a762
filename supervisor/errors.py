"""Gateway exceptions and their OpenAI-shaped error bodies."""

from __future__ import annotations

from typing import Any

from mlx_gateway.protocol.messages import Error


class GatewayError(Exception):
    """An error a client sees: ``{"error": {"message", "type", "param", "code"}}``."""

    status: int = 500
    type: str = "server_error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        if type is not None:
            self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


class BadRequest(GatewayError):
    status = 400
    type = "invalid_request_error"


class ContextLengthExceeded(BadRequest):
    """The worker's ``context_length_exceeded``, with its numbers (each API words them
    its own way: the message is OpenAI's)."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None,
        prompt_tokens: int,
        max_tokens: int | None,
        limit: int,
    ) -> None:
        super().__init__(message, param=param, code="context_length_exceeded")
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.limit = limit


class ModelNotFound(GatewayError):
    status = 404
    type = "invalid_request_error"

    def __init__(self, name: str, served: list[str]) -> None:
        self.name, self.served = name, served
        listing = ", ".join(served) if served else "(none configured)"
        super().__init__(
            f"The model '{name}' does not exist on this gateway. Served models: {listing}.",
            param="model",
            code="model_not_found",
        )


class ModelUnavailable(GatewayError):
    """The model cannot serve now: it failed to load, crashed, or the gateway stops."""

    status = 503
    type = "server_error"

    def __init__(self, message: str, *, code: str = "model_unavailable") -> None:
        super().__init__(message, code=code)


class WorkerCrashed(ModelUnavailable):
    def __init__(self, message: str) -> None:
        super().__init__(message, code="worker_crashed")


class TooManyRequests(GatewayError):
    status = 429
    type = "rate_limit_error"

    def __init__(
        self, name: str, max_concurrency: int, max_queue: int, retry_after: int = 1
    ) -> None:
        super().__init__(
            f"model '{name}' is at capacity: {max_concurrency + max_queue} requests are "
            f"already running or waiting for it (max_concurrency {max_concurrency} + "
            f"max_queue {max_queue}); retry later",
            code="model_at_capacity",
            headers={"Retry-After": str(retry_after)},
        )


def from_reply(reply: Error) -> GatewayError:
    """The exception of a worker's ``Error`` reply."""
    if reply.overflow is not None:
        return ContextLengthExceeded(
            reply.message,
            param=reply.param,
            prompt_tokens=reply.overflow.prompt_tokens,
            max_tokens=reply.overflow.max_tokens,
            limit=reply.overflow.limit,
        )
    return GatewayError(
        reply.message, status=reply.status, type=reply.type, param=reply.param, code=reply.code
    )
