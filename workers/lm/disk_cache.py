"""The disk tier of the prompt cache: KV caches that outlive their worker.

When a language model is stopped (evicted, idled out, unloaded) its prompt cache
entries are written here, and so is every entry that falls out of the memory LRU.
A later worker of the same model whose prompt starts with one of these token
prefixes loads that file instead of prefilling those tokens again.

Layout, under ``prompt_cache_dir``::

    <model key>/<sha256 of the token ids>.safetensors   (mlx-lm's save_prompt_cache)
    <model key>/<sha256 of the token ids>.tokens        (the token ids, uint32)

The *model key* hashes what makes a cache valid: the model's path, a fingerprint
of its weight files (name, size, mtime), the KV settings and the adapter (none
yet). A file whose metadata names another key (the weights changed), or that does
not load, is *stale or corrupt*: it is logged, deleted and treated as a miss;
never fatal. The directory is held under a byte cap: the least recently used
files (by mtime, touched on each load) go first.

Used on the MLX thread only.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_lm.models.cache import load_prompt_cache, save_prompt_cache

log = logging.getLogger(__name__)

SUFFIX = ".safetensors"
TOKENS = ".tokens"
KEY_FIELD = "mlx_gateway_model_key"


def model_key(model_path: str, model_dir: Path | None, adapter: str = "", kv: str = "") -> str:
    """A short hash of what makes a saved KV cache valid for a model."""
    digest = hashlib.sha256()
    for part in (model_path, adapter, kv):
        digest.update(part.encode() + b"\0")
    if model_dir is not None and model_dir.is_dir():
        for path in sorted(model_dir.glob("*.safetensors")):
            info = path.stat()
            digest.update(f"{path.name}:{info.st_size}:{info.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:24]


def token_hash(key: bytes) -> str:
    return hashlib.sha256(key).hexdigest()[:32]


@dataclass
class Found:
    """A cache loaded from disk; it holds exactly ``tokens``."""

    tokens: list[int]
    cache: list[Any]


class DiskCache:
    """One model's folder of saved prompt caches, held under ``max_bytes``."""

    def __init__(
        self, root: Path, key: str, max_bytes: int, total_bytes: int | None = None
    ) -> None:
        self.root = root
        self.key = key
        self.folder = root / key
        self.max_bytes = max(max_bytes, 0)
        self.total_bytes = self.max_bytes if total_bytes is None else max(total_bytes, 0)
        """The cap of the whole directory (other models' folders included)."""
        self.loads = 0
        self.saves = 0
        self._index: dict[str, bytes] | None = None  # file stem → token bytes

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    # ------------------------------------------------------------ lookup

    def candidates(self) -> dict[str, bytes]:
        """Every saved prefix of this model (read once, then kept up to date)."""
        if self._index is None:
            self._index = {}
            if self.folder.is_dir():
                for path in self.folder.glob(f"*{TOKENS}"):
                    try:
                        self._index[path.stem] = path.read_bytes()
                    except OSError as exc:
                        log.warning("prompt cache file %s ignored: %s", path, exc)
        return self._index

    def load(self, stem: str) -> Found | None:
        """Load one saved cache; ``None`` (and the files removed) when it is
        corrupt or stale."""
        tokens_bytes = self.candidates().get(stem)
        path = self.folder / f"{stem}{SUFFIX}"
        if tokens_bytes is None:
            return None
        try:
            cache, metadata = load_prompt_cache(str(path), return_metadata=True)
        except Exception as exc:  # a truncated or foreign file: never fatal
            log.warning("prompt cache file %s is corrupt, removed: %s", path, exc)
            self._remove(stem)
            return None
        if metadata.get(KEY_FIELD) != self.key or metadata.get("sha") != stem:
            log.warning("prompt cache file %s is stale (another model or version), removed", path)
            self._remove(stem)
            return None
        tokens = array("I")
        tokens.frombytes(tokens_bytes)
        if any(getattr(layer, "offset", len(tokens)) != len(tokens) for layer in cache):
            log.warning("prompt cache file %s does not match its token list, removed", path)
            self._remove(stem)
            return None
        self.loads += 1
        for name in (path, self.folder / f"{stem}{TOKENS}"):
            with contextlib.suppress(OSError):
                os.utime(name)  # recently used: the cap drops it last
        return Found(tokens.tolist(), cache)

    # ------------------------------------------------------------ saving

    def has(self, key: bytes) -> bool:
        return token_hash(key) in self.candidates()

    def save(self, key: bytes, cache: list[Any]) -> None:
        """Write ``cache`` (holding the tokens ``key``), then trim the folder to the cap.
        A failure is logged, never raised."""
        if not self.enabled or not cache:
            return
        stem = token_hash(key)
        if stem in self.candidates():
            return  # the same tokens are saved already
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = self.folder / f"{stem}.part{SUFFIX}"
            save_prompt_cache(str(tmp), cache, {KEY_FIELD: self.key, "sha": stem})
            (self.folder / f"{stem}{TOKENS}").write_bytes(key)
            os.replace(tmp, self.folder / f"{stem}{SUFFIX}")
        except Exception as exc:
            log.warning("could not save a prompt cache under %s: %s", self.folder, exc)
            self._remove(stem)
            return
        self.candidates()[stem] = key
        self.saves += 1
        self._trim(self.folder.glob(f"*{SUFFIX}"), self.max_bytes)
        self._trim(self.root.glob(f"*/*{SUFFIX}"), self.total_bytes)

    def _trim(self, paths: Iterable[Path], cap: int) -> None:
        """Delete the least recently used of ``paths`` until they hold ``cap`` bytes."""
        files: list[tuple[float, int, Path]] = []
        for path in paths:
            try:
                info = path.stat()
                tokens = path.with_suffix(TOKENS)
                size = info.st_size + (tokens.stat().st_size if tokens.exists() else 0)
            except OSError:
                continue
            files.append((info.st_mtime, size, path))
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= cap:
                break
            total -= size
            if path.parent == self.folder:
                self._remove(path.name.removesuffix(SUFFIX))
            else:
                for name in (path, path.with_suffix(TOKENS)):
                    name.unlink(missing_ok=True)

    def _remove(self, stem: str) -> None:
        for suffix in (SUFFIX, TOKENS, f".part{SUFFIX}"):
            with contextlib.suppress(OSError):
                (self.folder / f"{stem}{suffix}").unlink(missing_ok=True)
        self.candidates().pop(stem, None)
