"""The gateway's recent log lines, kept in memory and streamed to the web UI.

:class:`LogHub` is a :class:`logging.Handler` on the root logger: it keeps the last
``capacity`` records as small dicts (``ts``, ``level``, ``logger``, ``model``,
``message``; the model as :func:`..logs.split_model` finds it, so each worker's own
output names its model) and hands each new one to every subscriber's queue. A
subscriber that falls behind loses lines (its queue is bounded), never the gateway.

Records logged while a log stream writes (:func:`writing`) are not handed out: a
write to a client that is gone makes asyncio log a warning, which would be one more
line to write, and so on without end.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
from collections.abc import Iterator
from typing import Any

from mlx_gateway.supervisor.logs import split_model

SUBSCRIBER_QUEUE = 1000

_writing = contextvars.ContextVar("mlx_gateway_log_stream_writing", default=False)


def writing() -> None:
    """Mark the running task as a log stream's writer: what it logs from now on (its
    writes' own warnings included) is not streamed."""
    _writing.set(True)


class LogHub(logging.Handler):
    def __init__(self, capacity: int = 1000) -> None:
        super().__init__(level=logging.DEBUG)
        self.recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=capacity)
        self._subscribers: set[
            tuple[asyncio.AbstractEventLoop, asyncio.Queue[dict[str, Any] | None]]
        ] = set()
        self.closed = False

    def emit(self, record: logging.LogRecord) -> None:
        if _writing.get():
            return
        try:
            model, message = split_model(record)
            entry = {
                "ts": record.created,
                "level": record.levelname.lower(),
                "logger": record.name,
                "model": model,
                "message": message,
            }
        except Exception:  # a record that cannot be formatted is not worth a crash
            self.handleError(record)
            return
        self.recent.append(entry)
        for loop, queue in list(self._subscribers):
            with contextlib.suppress(RuntimeError):  # that loop is closed
                loop.call_soon_threadsafe(_offer, queue, entry)

    def close(self) -> None:
        """The gateway stops: every subscriber's queue gets ``None`` (its end), so
        live log streams finish instead of holding the server's shutdown."""
        self.closed = True
        for loop, queue in list(self._subscribers):
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_end, queue)

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[asyncio.Queue[dict[str, Any] | None]]:
        """A queue of every record logged from now on, while the block runs; a
        ``None`` in it means the hub closed (also at once if it already had)."""
        queue = asyncio.Queue[dict[str, Any] | None](SUBSCRIBER_QUEUE)
        if self.closed:
            queue.put_nowait(None)
        item = (asyncio.get_running_loop(), queue)
        self._subscribers.add(item)
        try:
            yield item[1]
        finally:
            self._subscribers.discard(item)


def _offer(queue: asyncio.Queue[dict[str, Any] | None], entry: dict[str, Any]) -> None:
    with contextlib.suppress(asyncio.QueueFull):
        queue.put_nowait(entry)


def _end(queue: asyncio.Queue[dict[str, Any] | None]) -> None:
    while True:  # make room: the end must get through even to a full queue
        try:
            queue.put_nowait(None)
            return
        except asyncio.QueueFull:
            queue.get_nowait()
