"""Downloading one Hugging Face repo for ``/api/pull``, with progress in Ollama's
shape: ``pulling manifest``, then per file ``{"status": "pulling <file>",
"digest", "total", "completed"}`` as its bytes arrive, then the caller's last
steps. huggingface_hub runs on a worker thread (it blocks); its byte counts
reach the event loop through a queue. The files land in the usual Hugging Face
cache (``HF_HUB_CACHE``), where workers find them; ``HF_ENDPOINT`` names the hub.
"""

from __future__ import annotations

import fnmatch
import os
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_gateway.supervisor.api.ollama.progress import Finished, Report, progress_of
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.pull import ALLOW_PATTERNS

REPORT_EVERY = 1 << 20
"""Bytes between two progress lines of one file."""


@dataclass
class Snapshot:
    """The downloaded repo: its folder in the cache and its bytes."""

    path: Path
    size: int


class PullFailed(GatewayError):
    """The repo could not be downloaded (the message says why and what to do)."""


def _endpoint() -> str | None:
    return os.environ.get("HF_ENDPOINT") or None


def hub_error(repo_id: str, exc: BaseException) -> PullFailed:
    """What went wrong, in words a user can act on."""
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = _endpoint() or "huggingface.co"
    if isinstance(exc, GatedRepoError):
        return PullFailed(
            f"pull {repo_id}: a gated repo: accept its terms on the hub and set HF_TOKEN",
            status=403,
        )
    if isinstance(exc, RepositoryNotFoundError | RevisionNotFoundError):
        return PullFailed(
            f"pull {repo_id}: no such repo on {where} (check the id; a private repo needs "
            "HF_TOKEN)",
            status=404,
        )
    if isinstance(exc, HFValidationError):
        return PullFailed(f"pull {repo_id}: not a Hugging Face repo id: {exc}", status=400)
    if isinstance(exc, OfflineModeIsEnabled) or constants.HF_HUB_OFFLINE:
        return PullFailed(
            f"pull {repo_id}: the gateway runs offline (HF_HUB_OFFLINE is set); unset it to "
            "download models",
            status=503,
        )
    return PullFailed(
        f"pull {repo_id}: the hub at {where} cannot be reached or failed: "
        f"{type(exc).__name__}: {exc}",
        status=502,
    )


def _wanted(name: str) -> bool:
    return any(fnmatch.fnmatch(name.rsplit("/", 1)[-1], pattern) for pattern in ALLOW_PATTERNS)


def _bar_class(
    line: dict[str, Any], size: int, emit: Callable[[dict[str, Any]], None]
) -> type[Any]:
    """A silent huggingface_hub progress bar that reports one file's bytes."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    class Bar(hf_tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)
            self.got = self.reported = 0

        def update(self, n: float | None = 1) -> bool | None:
            self.got += int(n or 0)
            if self.got - self.reported >= REPORT_EVERY:
                self.reported = self.got
                emit({**line, "completed": min(self.got, size)})
            return super().update(n)

    return Bar


def _download(
    repo_id: str, emit: Callable[[dict[str, Any]], None], stop: threading.Event
) -> Snapshot:
    """Blocking: list the repo's files, fetch those the workers read (until
    ``stop`` is set: the client left)."""
    from huggingface_hub import HfApi, constants, hf_hub_download

    if constants.HF_HUB_OFFLINE:
        raise hub_error(repo_id, RuntimeError("offline"))
    endpoint = _endpoint()
    info = HfApi(endpoint=endpoint).model_info(repo_id, files_metadata=True)
    files = [s for s in info.siblings or [] if _wanted(s.rfilename)]
    if not files:
        raise PullFailed(
            f"pull {repo_id}: the repo holds no model files (config, safetensors, tokenizer)",
            status=400,
        )
    folder: Path | None = None
    total_size = 0
    for sibling in files:
        if stop.is_set():
            raise PullFailed(f"pull {repo_id}: the client left", status=499)
        size = int(sibling.size or 0)
        total_size += size
        oid = sibling.lfs.sha256 if sibling.lfs is not None else sibling.blob_id
        line = {
            "status": f"pulling {sibling.rfilename}",
            "digest": f"sha256:{oid}" if oid else sibling.rfilename,
            "total": size,
            "completed": 0,
        }
        emit(dict(line))

        path = hf_hub_download(
            repo_id,
            sibling.rfilename,
            # by branch, not commit: the cache then records refs/main, where the
            # workers (and snapshot_download) look for the model
            endpoint=endpoint,
            tqdm_class=_bar_class(line, size, emit),
        )
        emit({**line, "completed": size})
        if folder is None:
            folder = Path(str(path))
            for _ in Path(sibling.rfilename).parts:
                folder = folder.parent
    assert folder is not None
    return Snapshot(folder, total_size)


async def download(repo_id: str) -> AsyncIterator[dict[str, Any] | Snapshot]:
    """Progress lines, then the :class:`Snapshot`; raises :class:`PullFailed`. A client
    that leaves stops the download after the file it is fetching; nothing is served
    from a pull that did not end."""
    yield {"status": "pulling manifest"}

    def work(report: Report, stop: threading.Event) -> Snapshot:
        return _download(repo_id, report, stop)

    try:
        async for line in progress_of(work):
            yield line.value if isinstance(line, Finished) else line
    except PullFailed:
        raise
    except Exception as exc:
        raise hub_error(repo_id, exc) from exc
