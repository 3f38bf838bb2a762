"""A blocking download on a worker thread, its progress lines streamed as they come.

``/api/pull`` fetches from the Hugging Face hub or from Ollama's registry with
blocking libraries; each runs ``work(report, stop)`` on a thread, which calls
``report`` with Ollama's progress lines and returns its result; ``stop`` is set
when the client leaves, and the work ends at its next check.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
Report = Callable[[dict[str, Any]], None]


@dataclass
class Finished(Generic[T]):
    """What the work returned: the last item :func:`progress_of` yields."""

    value: T


async def progress_of(
    work: Callable[[Report, threading.Event], T],
) -> AsyncIterator[dict[str, Any] | Finished[T]]:
    """The work's progress lines, then :class:`Finished`; its exception is raised."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    stop = threading.Event()

    def report(line: dict[str, Any]) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, line)

    task = asyncio.ensure_future(asyncio.to_thread(work, report, stop))
    try:
        while not task.done() or not queue.empty():
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield getter.result()
            else:
                getter.cancel()
        yield Finished(task.result())
    finally:
        if not task.done():  # the client left
            stop.set()
            task.cancel()
