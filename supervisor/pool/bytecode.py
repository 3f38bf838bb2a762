"""Compiled bytecode for the workers' imports, kept from one worker start to the next.

A worker imports a large stack (MLX, mlx-lm, transformers, …: about 500 modules for
a language model). Python normally caches their compiled bytecode in
``__pycache__`` next to the sources, but not when ``PYTHONDONTWRITEBYTECODE`` is set
(common in container images) or when the installed packages are read-only (a
system-wide or root-owned install). Then every worker compiles every module again
at every start: on a 2-core Linux box that was about 1 s of a 2.4-s ``import
mlx_lm``. With ``server.bytecode_cache`` on (the default), such a worker gets
``PYTHONPYCACHEPREFIX`` set to a folder of the gateway's own cache, which Python
then reads and writes instead (the sources and their folders are not touched), so
only the first start compiles. Nothing changes where bytecode is written as usual,
where the environment already sets ``PYTHONPYCACHEPREFIX``, or where the model's
``worker_env`` sets either variable.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Mapping
from pathlib import Path

from mlx_gateway.supervisor.config.pulled import state_dir

NO_WRITE = "PYTHONDONTWRITEBYTECODE"
PREFIX = "PYTHONPYCACHEPREFIX"


def default_folder() -> Path:
    """Where the workers' bytecode goes: ``bytecode/`` in the gateway's cache folder."""
    return state_dir() / "bytecode"


def packages_writable() -> bool:
    """Whether this interpreter's installed packages can take ``__pycache__`` folders."""
    return os.access(sysconfig.get_paths()["purelib"], os.W_OK)


def with_bytecode_cache(
    env: Mapping[str, str], worker_env: Mapping[str, str], folder: Path, writable: bool
) -> dict[str, str]:
    """``env`` for a worker, with the bytecode cache when the worker would otherwise
    compile its imports at every start (see the module doc). ``writable``: whether
    the worker's packages can take ``__pycache__`` folders."""
    out = dict(env)
    if PREFIX in out or NO_WRITE in worker_env or PREFIX in worker_env:
        return out
    if not out.get(NO_WRITE) and writable:
        return out
    out.pop(NO_WRITE, None)
    out[PREFIX] = str(folder)
    return out
