"""``stream_with_keepalive``: comments while quiet, and the API's own event only
after ``alive_every`` seconds without an event (written events reset that clock)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

from mlx_gateway.supervisor.http.keepalive import KeepAlive, comment_event, stream_with_keepalive

INTERVAL = 0.05
ALIVE_EVERY = 0.2
ALIVE = b"event: alive\ndata: {}\n\n"


async def written(
    pauses: list[float], alive_every: float = ALIVE_EVERY
) -> list[tuple[float, bytes]]:
    """What the stream writes when its body sends an event after each pause (in
    seconds), with the time since the start."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    out: list[tuple[float, bytes]] = []

    async def send(message: Any) -> None:
        out.append((loop.time() - start, message["body"]))

    async def body() -> AsyncIterator[bytes]:
        for pause in pauses:
            await asyncio.sleep(pause)
            yield b"data: event\n\n"

    keepalive = KeepAlive(INTERVAL, comment_event, lambda: ALIVE, alive_every)
    await stream_with_keepalive(body(), send, keepalive, lambda: "prefill 1/2 tokens")
    return out[:-1]  # the last is the end of the body


async def test_the_api_event_comes_after_alive_every_without_events() -> None:
    out = await written([0.7, 0.0])
    alive = [(at, chunk) for at, chunk in out if chunk.endswith(ALIVE)]
    comments = [chunk for _, chunk in out if chunk == b": prefill 1/2 tokens\n\n"]
    assert len(alive) >= 2 and comments, out
    assert all(chunk == b": prefill 1/2 tokens\n" + ALIVE for _, chunk in alive)
    assert alive[0][0] >= ALIVE_EVERY
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(alive)]
    assert all(gap >= ALIVE_EVERY * 0.9 for gap in gaps), gaps
    assert [chunk for _, chunk in out[-2:]] == [b"data: event\n\n"] * 2


async def test_events_written_put_the_api_event_off() -> None:
    # An event every 0.25 s for 2 s (longer than the interval, shorter than
    # alive_every, 1 s): comments between them, never the API's event.
    out = await written([0.25] * 8, alive_every=1.0)
    assert any(chunk.startswith(b": ") for _, chunk in out), out
    assert not [chunk for _, chunk in out if chunk.endswith(ALIVE)], out
