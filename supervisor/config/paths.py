"""Local paths in a config: which values name a folder of this machine, how they
resolve (from the config file's folder)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlx_gateway.supervisor.config.context import _Ctx
    from mlx_gateway.supervisor.config.yaml_positions import _KeyPath


def _absolute(base: Path, value: str) -> str:
    return os.path.abspath(os.path.join(base, os.path.expanduser(value)))


def _looks_local(base: Path, path: str) -> bool:
    """A local directory rather than a Hugging Face ``org/name`` repo id."""
    return (
        path.startswith(("/", "./", "../", "~"))
        or path in (".", "..")
        or path.count("/") > 1
        or os.path.exists(os.path.join(base, os.path.expanduser(path)))
    )


def model_folder(ctx: _Ctx, path: _KeyPath, written: str, what: str) -> str:
    """``written`` as given (a hub repo id) or as an absolute local folder that exists."""
    written = written.strip()
    if not written:
        raise ctx.error(path, f"{path[-1]} is empty")
    if not _looks_local(ctx.base_dir, written):
        return written
    resolved = _absolute(ctx.base_dir, written)
    gguf = resolved.endswith(".gguf") and os.path.isfile(resolved)  # a language model's
    if not os.path.isdir(resolved) and not gguf:
        state = "is not a directory" if os.path.exists(resolved) else "does not exist"
        raise ctx.error(
            path,
            f"local {what} directory {resolved!r} {state}; fix the path (relative paths "
            "start from the config file's folder), give a .gguf file, a Hugging Face "
            "repo id 'org/name' or an Ollama name 'ollama:name:tag'",
        )
    return resolved


def existing_file(ctx: _Ctx, path: _KeyPath, written: str, what: str) -> str:
    """``written`` as an absolute path to a file that exists."""
    resolved = _absolute(ctx.base_dir, written)
    if not os.path.isfile(resolved):
        raise ctx.error(
            path,
            f"{what} {resolved!r} does not exist; fix the path (relative paths start "
            "from the config file's folder)",
        )
    return resolved


def resolve_python(ctx: _Ctx, path: _KeyPath, value: str) -> str:
    if os.sep in value or value.startswith((".", "~")):
        resolved = _absolute(ctx.base_dir, value)
        if not (os.path.isfile(resolved) and os.access(resolved, os.X_OK)):
            raise ctx.error(
                path,
                f"interpreter {resolved!r} does not exist or is not executable; point it at "
                "a virtualenv's bin/python",
            )
        return resolved
    found = shutil.which(value)
    if found is None:
        raise ctx.error(
            path,
            f"interpreter {value!r} is not on PATH; give its full path (e.g. .venv/bin/python)",
        )
    return os.path.abspath(found)
