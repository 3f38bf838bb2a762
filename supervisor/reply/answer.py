"""A non-streamed answer that takes long: its headers early, then whitespace.

A request without ``stream`` gets nothing until its answer is complete, and a
long prefill (an agent's 20k-token prompt on a slow machine) takes minutes:
Claude Code's non-streaming fallback gives up after 300 s without a byte. So an
answer that is not ready within ``interval`` seconds of its start (the worker
accepted the request, so a rejection such as a context overflow is still a plain
HTTP error) commits to 200 and sends its headers, then one space every
``interval`` seconds while it waits — whitespace before a JSON value is valid
JSON, so every client parses the body as usual — then the JSON.

An error after the headers went out cannot become an HTTP error any more. When it
is the worker's death (killed, crashed, or stopped by the stuck-step watchdog) and
the caller can start the work ``again``, the answer is computed once more on the
worker that the next request starts, while the spaces go on: the client gets its
answer. Any other error (an unload, an admin's cancel, the gateway stopping), or a
second death, ends the body with the error object in the API's own shape
(``error_body``: OpenAI's ``{"error": {…}}`` unless the caller says otherwise)
after the spaces, the message the stream of the same request would end with. The
body always ends whole: a cut connection is what an SDK takes for a network fault,
and it would send the whole request again (into the same stuck step) and end with
"Connection error", never saying why. The SDKs build their result from such a body
as from any other (the ``openai`` SDK's ``ChatCompletion.error`` holds the error,
its ``choices`` ``None``; the Responses API's ``Response.error``; the ``anthropic``
SDK's ``Message`` of ``type`` ``"error"``), without a retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.errors import GatewayError, WorkerCrashed
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.http.error_body import openai_error_body
from mlx_gateway.supervisor.http.replies import JSONResponse

logger = logging.getLogger(__name__)

PAD = b" "
"""The keep-alive byte of a JSON answer that is not ready yet."""

ErrorBodyOf = Callable[[GatewayError], Any]
"""An API's error object (JSON-encodable) for a :class:`GatewayError`."""


async def json_answer(
    request: Request,
    work: Awaitable[Any],
    interval: float,
    again: Callable[[], Awaitable[Any]] | None = None,
    error_body: ErrorBodyOf = openai_error_body,
) -> Response:
    """The JSON answer whose content ``work`` computes (a Struct or builtins; it
    must release what it holds however it ends, cancelled too): a plain
    :class:`JSONResponse` when ready within ``interval`` seconds (its errors raised
    as HTTP errors), else a :class:`PaddedJSON` that waits for it. ``again`` makes
    a fresh ``work`` from the start (a new turn on the model's next worker), for an
    answer whose worker died after its headers went out; ``error_body`` is the
    API's error object that ends the body of one that failed after them."""
    task = asyncio.ensure_future(unless_disconnected(request, work))
    try:
        done, _ = await asyncio.wait({task}, timeout=interval)
    except BaseException:
        task.cancel()
        raise
    if done:
        return JSONResponse(task.result())
    rerun = None if again is None else (lambda: unless_disconnected(request, again()))
    return PaddedJSON(task, interval, rerun, error_body)


class PaddedJSON(Response):
    """A 200 ``application/json`` answer whose headers go out at once and whose
    content is ``task``'s result, preceded by a :data:`PAD` every ``interval``
    seconds of waiting; or ``error_body`` of its error."""

    media_type = "application/json"

    def __init__(
        self,
        task: asyncio.Future[Any],
        interval: float,
        again: Callable[[], Awaitable[Any]] | None = None,
        error_body: ErrorBodyOf = openai_error_body,
    ) -> None:
        # No Content-Length: the body goes out in chunks.
        self.status_code = 200
        self.background = None
        self.raw_headers = [(b"content-type", self.media_type.encode())]
        self.task = task
        self.interval = interval
        self.again = again
        self.error_body = error_body
        self.pads = 0
        self.aborted: GatewayError | None = None
        self.ended = False

    def abort(self, reason: BaseException) -> bool:
        """An admin's cancel (``POST /v1/requests/{id}/cancel``): the body ends with
        ``reason``'s error at once if the worker call took the cancel, else (the
        work waits for the model's next worker) within ``interval``."""
        if self.ended:
            return False
        if not isinstance(reason, GatewayError):
            reason = GatewayError(str(reason) or "the request was cancelled", status=503)
        self.aborted = reason
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The task watches the client (``unless_disconnected``): nothing here reads
        # ``receive``.
        recorder.note_abort(self.abort)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            try:
                content = await self._content(send)
            except ClientDisconnect:
                return
            body = msgspec.json.encode(content)
            await send({"type": "http.response.body", "body": body, "more_body": False})
        finally:
            self.ended = True
            if not self.task.done():
                self.task.cancel()
                with contextlib.suppress(BaseException):
                    await self.task

    async def _content(self, send: Send) -> Any:
        """The answer, or the error body it ended with; spaces while it waits."""
        while True:
            while not (await asyncio.wait({self.task}, timeout=self.interval))[0]:
                if self.aborted is not None:  # no worker call took the cancel
                    return self._failed(self.aborted)
                await send({"type": "http.response.body", "body": PAD, "more_body": True})
                self.pads += 1
            try:
                return self.task.result()
            except WorkerCrashed as exc:
                if self.again is None or self.aborted is not None:
                    return self._failed(exc)
                logger.warning(
                    "an answer's worker died after its headers went out; computing it "
                    "again on the model's next worker: %s",
                    exc.message,
                )
                self.task = asyncio.ensure_future(self.again())
                self.again = None  # once: a request that kills its worker is not retried
            except GatewayError as exc:
                return self._failed(exc)
            except ClientDisconnect:
                raise
            except Exception:
                logger.exception("an answer failed after its headers went out")
                return self._failed(GatewayError("The server had an error while answering."))

    def _failed(self, exc: GatewayError) -> Any:
        logger.warning(
            "an answer failed after its headers went out; its body ends with the error: %s",
            exc.message,
        )
        return self.error_body(exc)
