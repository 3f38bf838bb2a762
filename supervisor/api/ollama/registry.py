"""Pulling a model by its Ollama name for ``/api/pull``: the manifest and blobs from
Ollama's registry into the gateway's store (:mod:`...workers.runtime.ollama_pull`,
which blocks, on a worker thread), its progress lines streamed as they come, in
the shape Ollama streams them. The GGUF is converted by the model's worker at its
first load."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

from mlx_gateway.supervisor.api.ollama.download import PullFailed
from mlx_gateway.workers.runtime.ollama_pull import PullError, pull
from mlx_gateway.workers.runtime.ollama_store import OllamaName, own_store


async def pull_ollama(name: OllamaName) -> AsyncIterator[dict[str, Any]]:
    """Progress lines until the model is in the store; raises :class:`PullFailed`."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    stop = threading.Event()

    def report(line: dict[str, Any]) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, line)

    task = asyncio.ensure_future(asyncio.to_thread(pull, name, own_store(), report, stop))
    try:
        while not task.done() or not queue.empty():
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield getter.result()
            else:
                getter.cancel()
        try:
            task.result()
        except PullError as exc:
            raise PullFailed(exc.message, status=exc.status) from None
    finally:
        if not task.done():
            stop.set()  # the client left: the partial blob stays, a later pull resumes it
