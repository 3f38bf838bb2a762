"""A client's config file as ``connect`` edits it: the original kept, the new text
written whole, and ``--undo`` putting the original back byte for byte.

The first ``connect`` of a client copies its file to ``<file>.mlx-gateway-backup``
(permissions and times kept) and notes in a small record (under
``$XDG_STATE_HOME/mlx-gateway/connect/``) the path, whether the file existed, and
a digest of what was written. Later ``connect``s of that client merge into the
current file and keep the first backup. ``--undo`` moves the backup back (or
removes the file ``connect`` created); when someone else changed the file after
``connect`` wrote it, the current version is kept beside it as
``<file>.mlx-gateway-undone``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

BACKUP_SUFFIX = ".mlx-gateway-backup"
UNDONE_SUFFIX = ".mlx-gateway-undone"


class ConnectError(Exception):
    """What went wrong, worded for the user (the file, and how to fix it)."""


def state_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local/state")
    return Path(base) / "mlx-gateway" / "connect"


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_text(path: Path) -> str | None:
    """The file's text, ``None`` when it does not exist."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConnectError(f"cannot read {path}: {exc}") from None


def write_atomically(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass
class Edit:
    """One client's edited file, as recorded for ``--undo``."""

    client: str
    path: Path
    existed: bool
    written: str
    """SHA-256 of the bytes ``connect`` last wrote."""
    edited: bool = False
    """Someone else changed the file between two ``connect`` runs (their change was
    merged into the later write, and ``--undo`` keeps it aside)."""

    @property
    def backup(self) -> Path:
        return self.path.with_name(self.path.name + BACKUP_SUFFIX)


class Ledger:
    """The records of the edits ``connect`` made, one JSON file per client."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.dir = state_dir(env)

    def file(self, client: str) -> Path:
        """The record of ``client``'s connection."""
        return self.dir / f"{client}.json"

    def get(self, client: str) -> Edit | None:
        try:
            raw = json.loads(self.file(client).read_text(encoding="utf-8"))
            return Edit(
                client,
                Path(raw["path"]),
                bool(raw["existed"]),
                str(raw["written"]),
                bool(raw.get("edited", False)),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConnectError(f"the record {self.file(client)} is unreadable: {exc}") from None

    def put(self, edit: Edit) -> None:
        record = {
            "path": str(edit.path),
            "existed": edit.existed,
            "written": edit.written,
            "edited": edit.edited,
        }
        write_atomically(self.file(edit.client), json.dumps(record).encode() + b"\n", 0o600)

    def drop(self, client: str) -> None:
        self.file(client).unlink(missing_ok=True)


def apply(ledger: Ledger, client: str, path: Path, text: str) -> Edit:
    """Write ``text`` to ``path``; the first time, keep the original as the backup."""
    edit = ledger.get(client)
    if edit is not None and edit.path != path:
        raise ConnectError(
            f"{client} was connected through {edit.path}, not {path}: run "
            f"`mlx-gateway connect {client} --undo` first"
        )
    data = text.encode("utf-8")
    mode = 0o600
    if edit is None:
        existed = path.exists()
        if existed:
            mode = path.stat().st_mode & 0o777
            shutil.copy2(path, path.with_name(path.name + BACKUP_SUFFIX))
        edit = Edit(client, path, existed, _digest(data))
    elif path.exists():
        mode = path.stat().st_mode & 0o777
        edit.edited = edit.edited or _digest(path.read_bytes()) != edit.written
    write_atomically(path, data, mode)
    edit.written = _digest(data)
    ledger.put(edit)
    return edit


def undo(ledger: Ledger, client: str) -> list[str]:
    """Put the file back as it was before the first ``connect``; lines to print."""
    edit = ledger.get(client)
    if edit is None:
        raise ConnectError(f"{client} is not connected by mlx-gateway: nothing to undo")
    notes = []
    if edit.path.exists() and (edit.edited or _digest(edit.path.read_bytes()) != edit.written):
        kept = edit.path.with_name(edit.path.name + UNDONE_SUFFIX)
        shutil.copy2(edit.path, kept)
        notes.append(f"{edit.path} was also changed by others; that version is kept as {kept}")
    if edit.existed:
        if not edit.backup.exists():
            raise ConnectError(
                f"the backup {edit.backup} is gone: cannot restore {edit.path}; "
                f"remove {ledger.file(client)} to forget this connection"
            )
        os.replace(edit.backup, edit.path)
        notes.append(f"restored {edit.path}")
    else:
        edit.path.unlink(missing_ok=True)
        notes.append(f"removed {edit.path} (connect had created it)")
    ledger.drop(client)
    return notes
