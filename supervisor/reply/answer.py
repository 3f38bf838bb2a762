"""A non-streamed answer that takes long: its headers early, then whitespace.

A request without ``stream`` gets nothing until its answer is complete, and a
long prefill (an agent's 20k-token prompt on a slow machine) takes minutes:
Claude Code's non-streaming fallback gives up after 300 s without a byte. So an
answer that is not ready within ``interval`` seconds of its start (the worker
accepted the request, so a rejection such as a context overflow is still a plain
HTTP error) commits to 200 and sends its headers, then one space every
``interval`` seconds while it waits — whitespace before a JSON value is valid
JSON, so every client parses the body as usual — then the JSON.

An error after the headers went out cannot become an HTTP error any more: the
response is left unfinished (no final chunk), which clients read as a broken
connection and retry, as they would a 5xx; the retry of a prompt resumes from
the prompt cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import Any

import msgspec
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.http.replies import JSONResponse

logger = logging.getLogger(__name__)

PAD = b" "
"""The keep-alive byte of a JSON answer that is not ready yet."""


async def json_answer(request: Request, work: Awaitable[Any], interval: float) -> Response:
    """The JSON answer whose content ``work`` computes (a Struct or builtins; it
    must release what it holds however it ends, cancelled too): a plain
    :class:`JSONResponse` when ready within ``interval`` seconds (its errors raised
    as HTTP errors), else a :class:`PaddedJSON` that waits for it."""
    task = asyncio.ensure_future(unless_disconnected(request, work))
    try:
        done, _ = await asyncio.wait({task}, timeout=interval)
    except BaseException:
        task.cancel()
        raise
    if done:
        return JSONResponse(task.result())
    return PaddedJSON(task, interval)


class PaddedJSON(Response):
    """A 200 ``application/json`` answer whose headers go out at once and whose
    content is ``task``'s result, preceded by a :data:`PAD` every ``interval``
    seconds of waiting."""

    media_type = "application/json"

    def __init__(self, task: asyncio.Future[Any], interval: float) -> None:
        # No Content-Length: the body goes out in chunks.
        self.status_code = 200
        self.background = None
        self.raw_headers = [(b"content-type", self.media_type.encode())]
        self.task = task
        self.interval = interval
        self.pads = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The task watches the client (``unless_disconnected``): nothing here reads
        # ``receive``.
        task = self.task
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
            while not (await asyncio.wait({task}, timeout=self.interval))[0]:
                await send({"type": "http.response.body", "body": PAD, "more_body": True})
                self.pads += 1
            try:
                content = task.result()
            except ClientDisconnect:
                return
            except GatewayError as exc:
                logger.warning(
                    "an answer failed after its headers went out (left unfinished): %s",
                    exc.message,
                )
                return
            body = msgspec.json.encode(content)
            await send({"type": "http.response.body", "body": body, "more_body": False})
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
