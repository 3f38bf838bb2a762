"""Importing a worker kind's backend, and the load error that names the install
command when its extra is missing.

``pip install mlx-gateway`` installs the gateway alone; a worker kind's backend
library (and MLX) comes with an extra, ``pip install 'mlx-gateway[lm]'`` (the
kind table, :mod:`mlx_gateway.protocol.kinds`, says which). Before a worker imports
its backend module, :func:`import_backend` checks that the modules the backend
needs can be found, so a missing one fails the model load (HTTP 503 and
``/health``) with the command that installs it, not with a bare ModuleNotFoundError.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from mlx_gateway.protocol.kinds import KINDS, Extra, backend_module
from mlx_gateway.workers.runtime.contract import Backend, LoadError
from mlx_gateway.workers.runtime.packages import skip_package_init

DOCS = "docs/install.md"

BARE_PACKAGES: dict[str, tuple[str, ...]] = {"whisper": ("mlx_whisper",)}
"""Per kind, the libraries whose package ``__init__`` its worker does not run
(:mod:`.packages`): it imports their submodules, not what the ``__init__`` adds."""


def missing_modules(extra: Extra) -> list[str]:
    """The modules an extra's backend imports that cannot be found (none imported)."""
    return [name for name in extra.modules if importlib.util.find_spec(name) is None]


def not_installed(extra: Extra, missing: list[str]) -> LoadError:
    module = extra.backend.replace("-", "_")
    if module in missing or "mlx" in missing:
        what = f"backend {extra.backend} is not installed"
    else:
        names = ", ".join(f"'{name}'" for name in missing)
        what = f"backend {extra.backend} is incomplete (no module {names})"
    return LoadError(f"{what}: {extra.install_command()} (see {DOCS})")


def import_backend(kind: str, module: str | None = None) -> ModuleType:
    """Import the backend module of ``kind`` (``module`` overrides which);
    :class:`LoadError` for an unknown kind, and with the install command when its
    backend (or MLX) is missing or cannot be imported."""
    row = KINDS.get(kind)
    if row is None:
        known = ", ".join(sorted(KINDS))
        raise LoadError(f"unknown worker kind '{kind}' (known: {known})")
    extra = row.extra
    if missing := missing_modules(extra):
        raise not_installed(extra, missing)
    for package in BARE_PACKAGES.get(kind, ()):
        skip_package_init(package)
    try:
        return importlib.import_module(module or backend_module(kind))
    except ImportError as exc:
        if (exc.name or "").startswith("mlx_gateway"):
            raise  # our own bug, not an installation problem
        raise LoadError(
            f"backend {extra.backend} cannot be imported ({type(exc).__name__}: {exc}); "
            f"reinstall it: {extra.install_command()} (see {DOCS})"
        ) from exc


def create_backend(kind: str) -> Backend:
    """The backend of a worker kind (imports its module)."""
    backend: Backend = import_backend(kind).create_backend()
    return backend
