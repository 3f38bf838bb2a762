"""The web UI's log hub: what a log stream's own writing logs is not streamed (a
write to a gone client makes asyncio log a warning; streamed, it would be written,
warn again, and so on without end)."""

from __future__ import annotations

import asyncio
import logging

from mlx_gateway.supervisor.http.log_hub import LogHub, writing


async def _scenario() -> tuple[list[str], list[str]]:
    hub = LogHub()
    log = logging.getLogger("mlx_gateway.test.hub")
    log.addHandler(hub)
    log.setLevel(logging.INFO)
    try:
        with hub.subscribe() as queue:

            async def stream_writer() -> None:
                writing()
                log.warning("socket.send() raised exception.")  # as asyncio does

            async def elsewhere() -> None:
                log.warning("a model loaded")

            await asyncio.gather(stream_writer(), elsewhere())
            await asyncio.sleep(0)  # the hub hands lines over on the loop
            got = []
            while not queue.empty():
                item = queue.get_nowait()
                assert item is not None
                got.append(item["message"])
        return got, [entry["message"] for entry in hub.recent]
    finally:
        log.removeHandler(hub)


def test_what_a_log_stream_logs_while_writing_is_not_streamed() -> None:
    streamed, kept = asyncio.run(_scenario())
    assert streamed == ["a model loaded"]
    assert kept == ["a model loaded"]
