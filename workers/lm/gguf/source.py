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
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_gateway.workers.lm.gguf.arch import GgufError
from mlx_gateway.workers.runtime.cache import gateway_cache_dir
from mlx_gateway.workers.runtime.ollama_pull import PullError, pull
from mlx_gateway.workers.runtime.ollama_store import PREFIX, OllamaName, find_blob, own_store

log = logging.getLogger(__name__)

SPLIT = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")
BLOB = re.compile(r"^sha256-(?P<hex>[0-9a-f]{64})$")
DIGESTS = "digests.json"


@dataclass
class GgufSource:
    """The file(s) of one GGUF model (the first holds the metadata)."""

    files: list[Path]
    label: str

    @property
    def bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)


def conversions_dir() -> Path:
    """Where converted models are kept: ``<gateway cache>/gguf/<digest>``."""
    return gateway_cache_dir() / "gguf"


def _split_set(first: Path) -> list[Path]:
    match = SPLIT.match(first.name)
    if match is None:
        return [first]
    if int(match["part"]) != 1:
        raise GgufError(
            f"'{first}' is part {int(match['part'])} of a split GGUF; give the first part "
            f"({match['stem']}-00001-of-{match['count']}.gguf) as model_path"
        )
    count = int(match["count"])
    parts = [
        first.with_name(f"{match['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)
    ]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise GgufError(f"split GGUF '{first.name}' lacks its parts {', '.join(missing)}")
    return parts


def local_gguf(model_path: str) -> list[Path] | None:
    """The GGUF file(s) of a local ``model_path``; ``None`` when it names none."""
    local = Path(model_path).expanduser()
    if local.is_file() and local.suffix == ".gguf":
        return _split_set(local)
    if not local.is_dir() or (local / "config.json").is_file():
        return None
    found = sorted(local.glob("*.gguf"))
    firsts = [f for f in found if (m := SPLIT.match(f.name)) is None or int(m["part"]) == 1]
    if len(firsts) > 1:
        raise GgufError(
            f"folder '{local}' holds several GGUF models ({', '.join(f.name for f in firsts)}); "
            "give the file to serve as model_path"
        )
    return _split_set(firsts[0]) if firsts else None


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
    files = local_gguf(model_path)
    return GgufSource(files, files[0].name) if files else None


def _file_digest(path: Path, memo: dict[str, str]) -> str:
    if match := BLOB.match(path.name):  # an Ollama blob: named by its verified digest
        return match["hex"]
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    if key not in memo:
        with path.open("rb") as fh:
            memo[key] = hashlib.file_digest(fh, "sha256").hexdigest()
    return memo[key]


def digest_of(source: GgufSource) -> str:
    """The SHA-256 of the GGUF (of its parts' digests for a split set). A file's
    digest is remembered by path, size and modification time, so a multi-gigabyte
    file is hashed once."""
    memo_file = conversions_dir() / DIGESTS
    try:
        memo: dict[str, str] = json.loads(memo_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        memo = {}
    before = dict(memo)
    digests = [_file_digest(f, memo) for f in source.files]
    if memo != before:
        memo_file.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo_file.with_name(f".{DIGESTS}.{os.getpid()}")
        tmp.write_text(json.dumps(memo, indent=1), encoding="utf-8")
        os.replace(tmp, memo_file)
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256("".join(digests).encode()).hexdigest()
