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
answer, not a broken connection. Any other error, or a second death, leaves the
response unfinished (no final chunk), which clients read as a broken connection
and retry, as they would a 5xx (no 200 with an error body, which an SDK would take
for an answer).
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

from mlx_gateway.supervisor.errors import GatewayError, WorkerCrashed
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.http.replies import JSONResponse

logger = logging.getLogger(__name__)

PAD = b" "
"""The keep-alive byte of a JSON answer that is not ready yet."""


async def json_answer(
    request: Request,
    work: Awaitable[Any],
    interval: float,
    again: Callable[[], Awaitable[Any]] | None = None,
) -> Response:
    """The JSON answer whose content ``work`` computes (a Struct or builtins; it
    must release what it holds however it ends, cancelled too): a plain
    :class:`JSONResponse` when ready within ``interval`` seconds (its errors raised
    as HTTP errors), else a :class:`PaddedJSON` that waits for it. ``again`` makes
    a fresh ``work`` from the start (a new turn on the model's next worker), for an
    answer whose worker died after its headers went out."""
    task = asyncio.ensure_future(unless_disconnected(request, work))
    try:
        done, _ = await asyncio.wait({task}, timeout=interval)
    except BaseException:
        task.cancel()
        raise
    if done:
        return JSONResponse(task.result())
    rerun = None if again is None else (lambda: unless_disconnected(request, again()))
    return PaddedJSON(task, interval, rerun)


class PaddedJSON(Response):
    """A 200 ``application/json`` answer whose headers go out at once and whose
    content is ``task``'s result, preceded by a :data:`PAD` every ``interval``
    seconds of waiting."""

    media_type = "application/json"

    def __init__(
        self,
        task: asyncio.Future[Any],
        interval: float,
        again: Callable[[], Awaitable[Any]] | None = None,
    ) -> None:
        # No Content-Length: the body goes out in chunks.
        self.status_code = 200
        self.background = None
        self.raw_headers = [(b"content-type", self.media_type.encode())]
        self.task = task
        self.interval = interval
        self.again = again
        self.pads = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The task watches the client (``unless_disconnected``): nothing here reads
        # ``receive``.
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            while True:
                while not (await asyncio.wait({self.task}, timeout=self.interval))[0]:
                    await send({"type": "http.response.body", "body": PAD, "more_body": True})
                    self.pads += 1
                try:
                    content = self.task.result()
                except ClientDisconnect:
                    return
                except WorkerCrashed as exc:
                    if self.again is None:
                        self._unfinished(exc)
                        return
                    logger.warning(
                        "an answer's worker died after its headers went out; computing it "
                        "again on the model's next worker: %s",
                        exc.message,
                    )
                    self.task = asyncio.ensure_future(self.again())
                    self.again = None  # once: a request that kills its worker is not retried
                    continue
                except GatewayError as exc:
                    self._unfinished(exc)
                    return
                break
            body = msgspec.json.encode(content)
            await send({"type": "http.response.body", "body": body, "more_body": False})
        finally:
            if not self.task.done():
                self.task.cancel()
                with contextlib.suppress(BaseException):
                    await self.task

    @staticmethod
    def _unfinished(exc: GatewayError) -> None:
        logger.warning(
            "an answer failed after its headers went out (left unfinished): %s", exc.message
        )
