"""Which extra of the ``mlx-gateway`` package each worker kind needs, and the load
error that names the install command when it is missing.

``pip install mlx-gateway`` installs the gateway alone; a worker kind's backend
library (and MLX) comes with an extra, ``pip install 'mlx-gateway[lm]'``. Before a
worker imports its backend module, :func:`import_backend` checks that the modules
the backend needs can be found, so a missing one fails the model load (HTTP 503 and
``/health``) with the command that installs it, not with a bare ModuleNotFoundError.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from types import ModuleType

from mlx_gateway.workers.hub import LoadError

DOCS = "docs/install.md"


@dataclass(frozen=True)
class Extra:
    """One extra: its name, the backend library it is for, the top-level modules a
    worker of that kind imports, and, for a backend whose declared dependencies
    include torch or CUDA MLX, the requirement installed separately with --no-deps."""

    name: str
    backend: str
    modules: tuple[str, ...]
    no_deps: str = ""

    def install_command(self) -> str:
        command = f"pip install 'mlx-gateway[{self.name}]'"
        if self.no_deps:
            command += f" && pip install --no-deps '{self.no_deps}'"
        return command

    def missing(self) -> list[str]:
        """The modules of :attr:`modules` that cannot be found (none imported)."""
        return [name for name in self.modules if importlib.util.find_spec(name) is None]


EXTRAS: dict[str, Extra] = {
    "lm": Extra("lm", "mlx-lm", ("mlx", "mlx_lm", "llguidance")),
    "vlm": Extra("vlm", "mlx-vlm", ("mlx", "mlx_vlm", "PIL")),
    "embeddings": Extra("embeddings", "mlx-embeddings", ("mlx", "mlx_embeddings", "numpy")),
    "whisper": Extra(
        "whisper", "mlx-whisper", ("mlx", "mlx_whisper", "av", "numpy"), "mlx-whisper>=0.4.3,<0.5"
    ),
    "image": Extra("image", "mflux", ("mlx", "mflux", "PIL"), "mflux>=0.24,<0.25"),
}
"""Worker kind → its extra (the names match ``[project.optional-dependencies]``)."""


def not_installed(extra: Extra, missing: list[str]) -> LoadError:
    module = extra.backend.replace("-", "_")
    if module in missing or "mlx" in missing:
        what = f"backend {extra.backend} is not installed"
    else:
        names = ", ".join(f"'{name}'" for name in missing)
        what = f"backend {extra.backend} is incomplete (no module {names})"
    return LoadError(f"{what}: {extra.install_command()} (see {DOCS})")


def import_backend(kind: str, module: str) -> ModuleType:
    """Import the worker module ``module`` of ``kind``; :class:`LoadError` with the
    install command when its backend (or MLX) is missing or cannot be imported."""
    extra = EXTRAS.get(kind)
    if extra is None:
        return importlib.import_module(module)
    if missing := extra.missing():
        raise not_installed(extra, missing)
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if (exc.name or "").startswith("mlx_gateway"):
            raise  # our own bug, not an installation problem
        raise LoadError(
            f"backend {extra.backend} cannot be imported ({type(exc).__name__}: {exc}); "
            f"reinstall it: {extra.install_command()} (see {DOCS})"
        ) from exc
