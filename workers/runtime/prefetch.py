"""Read a model's weight files while the worker imports its backend.

A new worker spends about a second importing its backend (mlx-lm pulls in
transformers) before it opens the weights, and loading a model whose files are not
in the page cache then waits on the disk for as long again or more. The two need
not run one after the other: file reads release the GIL, so a thread can read the
weights into the operating system's file cache while the main work imports Python
modules, and the load that follows finds them in memory.

:func:`start_prefetch` starts that thread for a spec's ``model_path`` (a local
directory, or a Hugging Face repo id already in the local hub cache; nothing is
downloaded here). It reads at most ``limit`` bytes (by default half the memory
available now, so the read-ahead never pushes out the pages it just read), in the
order the files will be loaded, into one reused buffer: the data lands in the
page cache, and the process holds only that buffer (:data:`BLOCK`) while it reads. A model whose
``worker_env`` sets ``MLX_GATEWAY_READ_AHEAD=0`` skips it.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

WEIGHT_SUFFIXES = (".safetensors", ".npz", ".gguf")
"""The files a backend loads its weights from."""

BLOCK = 64 << 20
"""Bytes per read. Each read gives the GIL back to the imports, and taking it again
can wait for Python's switch interval (5 ms): with 8 MiB reads a cold 1 GiB file
came in at 0.3 to 0.7 GB/s beside ``import mlx_lm`` on 2 cores, with 64 MiB reads at
1.2 GB/s. The buffer lives as long as the read."""

READ_AHEAD_ENV = "MLX_GATEWAY_READ_AHEAD"
"""Set to ``0`` in a worker's environment to leave its weights to the load alone."""

_REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def weight_files(model_dir: Path) -> list[Path]:
    """The weight files under ``model_dir`` (sub-folders too: diffusion models keep
    one per component), in path order, which is the order of their shard numbers."""
    files = [p for p in model_dir.rglob("*") if p.suffix in WEIGHT_SUFFIXES and p.is_file()]
    return sorted(files)


def local_model_dir(model_path: str) -> Path | None:
    """The directory ``model_path`` names: itself when it is a local directory, the
    snapshot of a repo id that the local Hugging Face cache holds (found without
    importing ``huggingface_hub``, which would take the GIL from the imports this
    read runs beside); ``None`` otherwise."""
    local = Path(model_path).expanduser()
    if local.is_dir():
        return local
    if not _REPO_ID.match(model_path):
        return None
    repo = _hub_cache() / ("models--" + model_path.replace("/", "--"))
    try:
        revision = (repo / "refs" / "main").read_text().strip()
    except OSError:
        return None
    snapshot = repo / "snapshots" / revision
    return snapshot if snapshot.is_dir() else None


def _hub_cache() -> Path:
    if cache := os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(cache).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


class Prefetch:
    """A daemon thread reading ``files`` in order, up to ``limit`` bytes in all."""

    def __init__(self, files: list[Path], limit: int, block: int = BLOCK) -> None:
        self.files = files
        self.limit = limit
        self.block = block
        self.bytes_read = 0
        self.seconds = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="weights-prefetch", daemon=True)

    def start(self) -> Prefetch:
        self._thread.start()
        return self

    def _run(self) -> None:
        started = time.monotonic()
        buffer = bytearray(min(self.block, max(self.limit, 1)))
        try:
            for path in self.files:
                with path.open("rb", buffering=0) as f:
                    while not self._stop.is_set() and self.bytes_read < self.limit:
                        n = f.readinto(buffer)
                        if not n:
                            break
                        self.bytes_read += n
                if self._stop.is_set() or self.bytes_read >= self.limit:
                    break
        except OSError as exc:  # the load that follows reports a missing file itself
            log.debug("prefetch of the weights stopped: %s", exc)
        finally:
            self.seconds = time.monotonic() - started

    def stop(self) -> None:
        """Stop reading (the load has ended, or failed) and wait for the read in flight."""
        self._stop.set()
        self._thread.join()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the read to end by itself; True once it has."""
        self._thread.join(timeout)
        return self.done

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def summary(self) -> str:
        """What the read-ahead did, for the worker's ``ready:`` log line."""
        total = sum(_size(p) for p in self.files)
        return (
            f"weights read ahead {self.bytes_read / 2**20:,.1f} of {total / 2**20:,.1f} MiB "
            f"in {self.seconds:.2f} s"
        )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def start_prefetch(
    model_path: str, limit: int | None = None, block: int = BLOCK
) -> Prefetch | None:
    """Start reading ``model_path``'s weights in the background; ``None`` when it
    names no local directory with weight files (a repo id still to download), or
    when :data:`READ_AHEAD_ENV` is ``0``."""
    if os.environ.get(READ_AHEAD_ENV, "").strip() == "0":
        return None
    model_dir = local_model_dir(model_path)
    if model_dir is None:
        return None
    files = weight_files(model_dir)
    if not files:
        return None
    if limit is None:
        limit = psutil.virtual_memory().available // 2
    return Prefetch(files, limit, block).start()
