"""The gateway's recent log lines, kept in memory and streamed to the web UI.

:class:`LogHub` is a :class:`logging.Handler` on the root logger: it keeps the last
``capacity`` records as small dicts (``ts``, ``level``, ``logger``, ``model``,
``message``; the model as :func:`..logs.split_model` finds it, so each worker's own
output names its model) and hands each new one to every subscriber's queue. A
subscriber that falls behind loses lines (its queue is bounded), never the gateway.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from mlx_gateway.supervisor.logs import split_model

SUBSCRIBER_QUEUE = 1000


class LogHub(logging.Handler):
    def __init__(self, capacity: int = 1000) -> None:
        super().__init__(level=logging.DEBUG)
        self.recent: collections.deque[dict[str, Any]] = collections.deque(maxlen=capacity)
        self._subscribers: set[tuple[asyncio.AbstractEventLoop, asyncio.Queue[dict[str, Any]]]] = (
            set()
        )

    def emit(self, record: logging.LogRecord) -> None:
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

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[asyncio.Queue[dict[str, Any]]]:
        """A queue of every record logged from now on, while the block runs."""
        item = (asyncio.get_running_loop(), asyncio.Queue[dict[str, Any]](SUBSCRIBER_QUEUE))
        self._subscribers.add(item)
        try:
            yield item[1]
        finally:
            self._subscribers.discard(item)


def _offer(queue: asyncio.Queue[dict[str, Any]], entry: dict[str, Any]) -> None:
    with contextlib.suppress(asyncio.QueueFull):
        queue.put_nowait(entry)
