"""Which GGUF file(s) a ``model_path`` names, and the digest its converted folder is
kept under.

``model_path`` names a GGUF when it is a ``.gguf`` file, a folder holding one GGUF
model and no ``config.json`` (an MLX folder is served as it is), the first part of
a split set (``name-00001-of-00003.gguf``, the others beside it), or an Ollama
name (``ollama:qwen3:4b``: its blob in the gateway's store or in Ollama's own,
pulled from Ollama's registry when in neither).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_gateway.store.gguf_files import (
    BLOB,
    DIGESTS,
    GgufPathError,
    combined_digest,
    conversions_dir,
    local_gguf,
    memo_key,
    read_memo,
)
from mlx_gateway.store.ollama_pull import PullError, pull
from mlx_gateway.store.ollama_store import PREFIX, OllamaName, find_blob, own_store
from mlx_gateway.workers.lm.gguf.arch import GgufError

log = logging.getLogger(__name__)


@dataclass
class GgufSource:
    """The file(s) of one GGUF model (the first holds the metadata)."""

    files: list[Path]
    label: str

    @property
    def bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)


def find_source(
    model_path: str, report: Callable[[dict[str, Any]], None] = lambda line: None
) -> GgufSource | None:
    """The GGUF ``model_path`` names (pulling an Ollama name not on disk yet, with
    ``report`` given the pull's progress lines), or ``None``."""
    if model_path.startswith(PREFIX):
        try:
            name = OllamaName.parse(model_path)
        except ValueError as exc:
            raise GgufError(str(exc)) from None
        blob = find_blob(name)
        if blob is None:
            log.info("pulling %s from Ollama's registry", name.display)
            try:
                blob = pull(name, own_store(), report)
            except PullError as exc:
                raise GgufError(exc.message) from None
        return GgufSource([blob], name.display)
    try:
        files = local_gguf(model_path)
    except GgufPathError as exc:
        raise GgufError(str(exc)) from None
    return GgufSource(files, files[0].name) if files else None


def _file_digest(path: Path, memo: dict[str, str]) -> str:
    if match := BLOB.match(path.name):  # an Ollama blob: named by its verified digest
        return match["hex"]
    key = memo_key(path)
    if key not in memo:
        with path.open("rb") as fh:
            memo[key] = hashlib.file_digest(fh, "sha256").hexdigest()
    return memo[key]


def digest_of(source: GgufSource) -> str:
    """The SHA-256 of the GGUF (of its parts' digests for a split set). A file's
    digest is remembered by path, size and modification time, so a multi-gigabyte
    file is hashed once."""
    memo_file = conversions_dir() / DIGESTS
    memo = read_memo()
    before = dict(memo)
    digests = [_file_digest(f, memo) for f in source.files]
    if memo != before:
        memo_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_file.with_name(f".{DIGESTS}.{os.getpid()}")
        tmp.write_text(json.dumps(memo, indent=1), encoding="utf-8")
        os.replace(tmp, memo_file)
    return combined_digest(digests)
