"""Which GGUF file(s) a ``model_path`` names and where their converted MLX folder is
kept, without MLX: read by the worker that converts (``workers/lm/gguf/source.py``)
and by the gateway that sizes the model before and after its conversion.

A local ``model_path`` names a GGUF when it is a ``.gguf`` file, a folder holding
one GGUF model and no ``config.json`` (an MLX folder is served as it is), or the
first part of a split set (``name-00001-of-00003.gguf``, the others beside it). The
converted folder is ``<gateway cache>/gguf/<sha256>``; the digest of a file is
remembered in ``digests.json`` by its path, size and modification time (an Ollama
blob is named by its digest).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from mlx_gateway.store.cache import gateway_cache_dir
from mlx_gateway.store.ollama_store import PREFIX, OllamaName, find_blob

SPLIT = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$")
BLOB = re.compile(r"^sha256-(?P<hex>[0-9a-f]{64})$")
DIGESTS = "digests.json"
PROJECTORS = ("mmproj",)
"""A vision projector's GGUF (``mmproj-*.gguf``) sits beside its model's; never a
model of its own."""


class GgufPathError(ValueError):
    """A ``model_path`` that names GGUF files in a way that cannot be served (the
    message says which and what to give instead)."""


def conversions_dir() -> Path:
    """Where converted models are kept: ``<gateway cache>/gguf/<digest>``."""
    return gateway_cache_dir() / "gguf"


def split_set(first: Path) -> list[Path]:
    """``first`` and the other parts of its split set (just ``[first]`` when whole)."""
    match = SPLIT.match(first.name)
    if match is None:
        return [first]
    if int(match["part"]) != 1:
        raise GgufPathError(
            f"'{first}' is part {int(match['part'])} of a split GGUF; give the first part "
            f"({match['stem']}-00001-of-{match['count']}.gguf) as model_path"
        )
    count = int(match["count"])
    parts = [
        first.with_name(f"{match['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)
    ]
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        raise GgufPathError(f"split GGUF '{first.name}' lacks its parts {', '.join(missing)}")
    return parts


def model_files(folder: Path) -> list[Path]:
    """The GGUF models of ``folder``: each file, or each split set's first part,
    vision projectors left out."""
    found = sorted(folder.glob("*.gguf"))
    return [
        f
        for f in found
        if ((m := SPLIT.match(f.name)) is None or int(m["part"]) == 1)
        and not f.name.lower().startswith(PROJECTORS)
    ]


def local_gguf(model_path: str) -> list[Path] | None:
    """The GGUF file(s) of a local ``model_path``; ``None`` when it names none."""
    local = Path(model_path).expanduser()
    if local.is_file() and local.suffix == ".gguf":
        return split_set(local)
    if not local.is_dir() or (local / "config.json").is_file():
        return None
    firsts = model_files(local)
    if len(firsts) > 1:
        raise GgufPathError(
            f"folder '{local}' holds several GGUF models ({', '.join(f.name for f in firsts)}); "
            "give the file to serve as model_path"
        )
    return split_set(firsts[0]) if firsts else None


def gguf_on_disk(model_path: str) -> list[Path] | None:
    """The GGUF file(s) ``model_path`` names that are on this machine (an Ollama
    name's blob in the gateway's store or Ollama's); ``None`` for anything else,
    or a path that cannot be served (its load says why)."""
    if model_path.startswith(PREFIX):
        try:
            blob = find_blob(OllamaName.parse(model_path))
        except ValueError:
            return None
        return [blob] if blob is not None else None
    try:
        return local_gguf(model_path)
    except (GgufPathError, OSError):
        return None


def memo_key(path: Path) -> str:
    """How ``digests.json`` remembers a file: its path, size and modification time."""
    stat = path.stat()
    return f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"


def read_memo() -> dict[str, str]:
    try:
        memo = json.loads((conversions_dir() / DIGESTS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return memo if isinstance(memo, dict) else {}


def combined_digest(digests: list[str]) -> str:
    """The key of a model's converted folder: its file's SHA-256, or for a split
    set the SHA-256 of its parts' digests."""
    if len(digests) == 1:
        return digests[0]
    return hashlib.sha256("".join(digests).encode()).hexdigest()


def converted_folder(files: list[Path]) -> Path | None:
    """The converted MLX folder of these GGUF file(s), when they were converted
    already and their digests are known without hashing them; else ``None``."""
    memo = read_memo()
    digests = []
    for path in files:
        if match := BLOB.match(path.name):
            digests.append(match["hex"])
            continue
        try:
            digest = memo.get(memo_key(path))
        except OSError:
            return None
        if digest is None:
            return None
        digests.append(digest)
    if not digests:
        return None
    folder = conversions_dir() / combined_digest(digests)
    return folder if (folder / "config.json").is_file() else None
