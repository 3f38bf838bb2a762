"""Pulling a model by its Ollama name for ``/api/pull``: the manifest and blobs from
Ollama's registry into the gateway's store (:mod:`...store.ollama_pull`,
which blocks, on a worker thread), its progress lines streamed as they come, in
the shape Ollama streams them. The GGUF is converted by the model's worker at its
first load."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from typing import Any

from mlx_gateway.store.ollama_pull import PullError, pull
from mlx_gateway.store.ollama_store import OllamaName, own_store
from mlx_gateway.supervisor.api.ollama.download import PullFailed
from mlx_gateway.supervisor.api.ollama.progress import Finished, Report, progress_of


async def pull_ollama(name: OllamaName) -> AsyncIterator[dict[str, Any]]:
    """Progress lines until the model is in the store; raises :class:`PullFailed`. A
    client that leaves stops the pull; the partial blob stays, a later pull resumes it."""

    def work(report: Report, stop: threading.Event) -> None:
        pull(name, own_store(), report, stop)

    try:
        async for line in progress_of(work):
            if not isinstance(line, Finished):
                yield line
    except PullError as exc:
        raise PullFailed(exc.message, status=exc.status) from None
