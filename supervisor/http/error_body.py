"""The error object of each API family: OpenAI's (an error reply's body and a
stream's error event), Anthropic's and Ollama's.

The surfaces answer their HTTP errors and end their streams with these, and a
whole answer whose headers already went out ends its body with one
(:mod:`...reply.answer`), so each is a function of the :class:`GatewayError`
alone that any surface, or the one serve below them, can pick."""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from mlx_gateway.supervisor.errors import ContextLengthExceeded, GatewayError, ModelNotFound
from mlx_gateway.supervisor.pool.names import listed


class ErrorBody(Struct):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorEvent(Struct):
    """The final SSE event of a stream that failed after it started."""

    error: ErrorBody


def openai_error_body(exc: GatewayError) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``."""
    return exc.body()


ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def anthropic_error_type(status: int) -> str:
    """The Anthropic error ``type`` of an HTTP status."""
    return ANTHROPIC_ERROR_TYPES.get(
        status, "api_error" if status >= 500 else "invalid_request_error"
    )


def anthropic_overflow_message(exc: ContextLengthExceeded) -> str:
    """A context overflow in the Anthropic API's own words, which clients parse:
    Claude Code retries with the ``max_tokens`` that fits when it reads the first."""
    if exc.max_tokens is not None and exc.prompt_tokens <= exc.limit:
        return (
            f"input length and `max_tokens` exceed context limit: {exc.prompt_tokens} + "
            f"{exc.max_tokens} > {exc.limit}, decrease input length or `max_tokens` and "
            "try again"
        )
    return f"prompt is too long: {exc.prompt_tokens} tokens > {exc.limit} maximum"


def anthropic_error_message(exc: GatewayError) -> str:
    """The message of ``exc`` for an Anthropic client (the OpenAI ``param`` goes into it)."""
    if isinstance(exc, ContextLengthExceeded):
        return anthropic_overflow_message(exc)
    if exc.param and exc.param not in exc.message:
        return f"{exc.message} (param: {exc.param})"
    return exc.message


def anthropic_error_body(exc: GatewayError) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``."""
    error = {"type": anthropic_error_type(exc.status), "message": anthropic_error_message(exc)}
    return {"type": "error", "error": error}


def ollama_error_message(exc: GatewayError) -> str:
    """The message of ``exc`` for an Ollama client (its context overflow in Ollama's
    terms, the OpenAI ``param`` as the field, a missing model's neighbours as
    ``/api/tags`` lists them)."""
    if isinstance(exc, ModelNotFound) and exc.code == "model_not_found":  # not a route's 400
        return ModelNotFound(exc.name, [listed(name) for name in exc.served]).message
    if isinstance(exc, ContextLengthExceeded):
        if exc.max_tokens is None or exc.prompt_tokens >= exc.limit:
            return (
                f"the prompt ({exc.prompt_tokens} tokens) does not fit the model's context "
                f"of {exc.limit} tokens; shorten the conversation"
            )
        return (
            f"the prompt ({exc.prompt_tokens} tokens) with the answer's limit "
            f"({exc.max_tokens} tokens) does not fit the model's context of {exc.limit} "
            "tokens; shorten the conversation or lower options.num_predict"
        )
    if exc.param and exc.param not in exc.message:
        return f"{exc.message} (field: {exc.param})"
    return exc.message


def ollama_error_body(exc: GatewayError) -> dict[str, Any]:
    """``{"error": "..."}``."""
    return {"error": ollama_error_message(exc)}
