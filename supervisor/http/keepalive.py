"""Keep-alives for streams that have nothing to send yet.

Once a stream's headers went out, it can stay silent for a long time: its model
loads, the worker reads (prefills) a prompt of tens of thousands of tokens, the
request waits for a free slot, or the gateway holds back a tool call it is still
parsing. Clients and proxies with an idle timeout give up on such a stream (Claude
Code aborts after 300 s without a byte, and sends the request again). So a stream
that wrote nothing for ``interval`` seconds gets a keep-alive event, which clients
ignore: an SSE comment on the OpenAI APIs (``: prefill 4096/20000 tokens``), and
on Anthropic Messages an ``event: ping`` as Anthropic's own API sends, preceded by
the same note as a comment line. Comments and pings never reach the application
behind an SDK, so a watchdog there (Claude Code's and Codex's: 300 s) does not see
them: once a stream's opening went out, the Responses API and Anthropic Messages
make a keep-alive after each 30 s without an event one of their own grammar
(``KeepAlive.alive``), which the SDKs hand on and which changes nothing.

:func:`stream_with_keepalive` writes a response body with a ticker task beside it;
the ticker writes only when the stream was quiet for the whole interval, so a
stream that flows costs one timer wake-up per interval and nothing per event.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.types import Send

from mlx_gateway.supervisor.config import ServerConfig

DEFAULT_INTERVAL = 2.0
"""Seconds of silence before a keep-alive (``server.stream_keepalive``)."""

PING = b'event: ping\ndata: {"type": "ping"}\n\n'
"""Anthropic's keep-alive event."""


def comment_event(note: str) -> bytes:
    """An SSE comment: ``: <note>`` (``: keep-alive`` without a note)."""
    return f": {_one_line(note) or 'keep-alive'}\n\n".encode()


def ping_event(note: str) -> bytes:
    """Anthropic's ``event: ping``, with the note as a comment line of the same event."""
    return with_note(note, PING)


def with_note(note: str, event: bytes) -> bytes:
    """``event`` (one whole SSE event) with the note as a comment line before it."""
    line = _one_line(note)
    return (f": {line}\n".encode() if line else b"") + event


def _one_line(note: str) -> str:
    return " ".join(note.split())


@dataclass(frozen=True)
class KeepAlive:
    """What a quiet stream sends, and after how long."""

    interval: float = DEFAULT_INTERVAL
    event: Callable[[str], bytes] = comment_event
    """The keep-alive event carrying a note (what the stream waits for)."""
    alive: Callable[[], bytes] = bytes
    """The API's own event that changes nothing (``b""`` while there is none to
    send): sent with the note instead of ``event`` once the stream was quiet for
    ``alive_every`` seconds, and again after each ``alive_every`` more."""
    alive_every: float = 30.0


def keepalive_for(server: ServerConfig, *, anthropic: bool = False) -> KeepAlive:
    """The keep-alive of a stream served under ``server``'s settings."""
    return KeepAlive(server.stream_keepalive, ping_event if anthropic else comment_event)


def _body(chunk: bytes) -> dict[str, Any]:
    return {"type": "http.response.body", "body": chunk, "more_body": True}


async def stream_with_keepalive(
    body: AsyncIterable[bytes], send: Send, keepalive: KeepAlive, note: Callable[[], str]
) -> None:
    """Write every chunk of ``body`` (each a whole SSE event) to ``send``, and a
    keep-alive carrying ``note()`` whenever nothing was written for
    ``keepalive.interval`` seconds (``keepalive.alive``'s event after
    ``keepalive.alive_every`` seconds without an event). Writes never interleave; the response start
    must already be sent. A keep-alive that cannot be written stops the ticker
    (the client left: the server's disconnect ends the stream)."""
    loop = asyncio.get_running_loop()
    lock = asyncio.Lock()
    last = loop.time()  # when anything was last written
    last_event = last  # when the stream's own events or keepalive.alive's were

    async def write(chunk: bytes) -> None:
        nonlocal last, last_event
        async with lock:
            await send(_body(chunk))
            last = last_event = loop.time()

    def keepalive_event() -> tuple[bytes, bool]:
        if loop.time() - last_event >= keepalive.alive_every:
            event = keepalive.alive()
            if event:
                return with_note(note(), event), True
        return keepalive.event(note()), False

    async def tick() -> None:
        nonlocal last, last_event
        while True:
            delay = last + keepalive.interval - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            async with lock:
                if loop.time() - last < keepalive.interval:
                    continue  # the stream wrote while this waited for the lock
                event, alive = keepalive_event()
                try:
                    await send(_body(event))
                except Exception:
                    return
                last = loop.time()
                if alive:
                    last_event = last

    ticker = asyncio.ensure_future(tick())
    try:
        async for chunk in body:
            await write(chunk)
    finally:
        ticker.cancel()
        await asyncio.wait({ticker})
    async with lock:
        await send({"type": "http.response.body", "body": b"", "more_body": False})
