"""Exception handlers: every error a client sees is OpenAI-shaped."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.http.replies import error_response

logger = logging.getLogger(__name__)

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


async def gateway_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, GatewayError)
    return error_response(exc)


async def http_exception(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (unknown path, wrong method) in the OpenAI shape."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"Unknown path: {request.method} {request.url.path}"
    elif exc.status_code == 405:
        message = f"Method {request.method} is not allowed on {request.url.path}"
    else:
        message = exc.detail
    error = GatewayError(
        message,
        status=exc.status_code,
        type="invalid_request_error" if exc.status_code < 500 else "server_error",
        code=_HTTP_CODES.get(exc.status_code),
        headers=dict(exc.headers or {}),
    )
    return error_response(error)


async def client_disconnect(request: Request, exc: Exception) -> Response:
    """The client left before its answer: nobody reads this response."""
    logger.debug("client left before the response: %s %s", request.method, request.url.path)
    return Response(status_code=499)


async def number_too_large(request: Request, exc: Exception) -> Response:
    """A number from the request that the wire to the worker cannot carry (msgpack
    holds 64-bit integers): the fields with known ranges are checked when the body
    is decoded; this catches one inside free-form data (``chat_template_kwargs``)."""
    logger.warning("request to %s held an unencodable number: %s", request.url.path, exc)
    return error_response(
        BadRequest(
            "The request holds a number too large to pass to the model (integers must "
            "fit in 64 bits)."
        )
    )


async def unexpected_error(request: Request, exc: Exception) -> Response:
    """Any other exception: a generic OpenAI-shaped 500, the traceback in the log."""
    logger.error("unhandled error in %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(GatewayError("The server had an error while processing the request."))


exception_handlers = {
    GatewayError: gateway_error,
    HTTPException: http_exception,
    ClientDisconnect: client_disconnect,
    OverflowError: number_too_large,
    Exception: unexpected_error,
}
"""For ``Starlette(exception_handlers=...)``."""


Handler = Callable[[Request], Awaitable[Response]]


def errors_shaped_by(render: Callable[[GatewayError], Response]) -> Callable[[Handler], Handler]:
    """A decorator for the routes of an API with an error shape of its own (Anthropic's,
    Ollama's): the :class:`GatewayError`\\ s of the handler become ``render(error)``."""

    def decorate(handler: Handler) -> Handler:
        async def wrapped(request: Request) -> Response:
            try:
                return await handler(request)
            except GatewayError as exc:
                return render(exc)

        wrapped.__doc__ = handler.__doc__
        wrapped.__name__ = handler.__name__
        return wrapped

    return decorate
