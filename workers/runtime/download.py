"""Download progress of a hub model, for ``/v1/models`` and the loading comments.

huggingface_hub reports the bytes of a snapshot download through the ``tqdm_class``
it is given, from its download threads; :class:`ProgressTqdm` records them in
:data:`DOWNLOAD` (no console bars in the worker's log). The worker's main thread,
which owns the gateway socket, reads it with :meth:`DownloadProgress.take` at each
heartbeat and sends a ``Progress(stage="download", fraction=…)`` when it moved.
"""

from __future__ import annotations

import threading
from typing import Any

# The snapshot's aggregated byte bar (huggingface_hub's name for it).
BYTES_BAR = "huggingface_hub.snapshot_download"


class DownloadProgress:
    """Bytes done and expected; written by download threads, read by the main thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = 0
        self._total = 0
        self._changed = False

    def record(self, done: int, total: int) -> None:
        with self._lock:
            self._done, self._total, self._changed = done, total, True

    def take(self) -> tuple[int, int] | None:
        """``(done, total)`` bytes if they changed since the last call."""
        with self._lock:
            if not self._changed:
                return None
            self._changed = False
            return self._done, self._total


DOWNLOAD = DownloadProgress()


def describe(done: int, total: int) -> tuple[float | None, str]:
    """The fraction and a human detail (``1.2 of 2.5 GB``) of a download."""
    fraction = min(done / total, 1.0) if total > 0 else None
    scale, unit = (1e9, "GB") if max(done, total) >= 1e9 else (1e6, "MB")
    return fraction, f"{done / scale:.1f} of {total / scale:.1f} {unit}"


def progress_tqdm_class() -> type[Any]:
    """A huggingface_hub ``tqdm`` that records the snapshot's byte progress."""
    from huggingface_hub.utils import tqdm as hf_tqdm

    class ProgressTqdm(hf_tqdm):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._records = kwargs.get("name") == BYTES_BAR
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

        def update(self, n: float | None = 1) -> bool | None:
            if self._records:
                # A disabled bar does not count; keep our own tally.
                self._done = getattr(self, "_done", 0) + int(n or 0)
                DOWNLOAD.record(self._done, int(self.total or 0))
            return super().update(n)

    return ProgressTqdm
