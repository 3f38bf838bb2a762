"""Which models the current request may see: the scope of the app whose key it
carries (``server.keys[].models``).

The auth middleware sets the scope for the request (a context variable, which every
task the request starts inherits); :meth:`.registry.Registry.resolve` and
:meth:`.registry.Registry.visible` read it, so that a model outside it is a 404 and
is listed nowhere, on every surface, exactly as if it were not configured.
Outside a request (startup, housekeeping, a gateway without keys) every model is
in scope.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

from mlx_gateway.supervisor.config import ModelConfig
from mlx_gateway.supervisor.config.apps import in_scope

_scope: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "mlx_gateway_model_scope", default=None
)


def set_scope(patterns: tuple[str, ...] | None) -> contextvars.Token[tuple[str, ...] | None]:
    """Limit the current request to the models ``patterns`` name (``None``: all)."""
    return _scope.set(patterns)


def reset_scope(token: contextvars.Token[tuple[str, ...] | None]) -> None:
    _scope.reset(token)


@contextlib.contextmanager
def scoped(patterns: tuple[str, ...] | None) -> Iterator[None]:
    """Within the block, only the models ``patterns`` name exist."""
    token = _scope.set(patterns)
    try:
        yield
    finally:
        _scope.reset(token)


def current_scope() -> tuple[str, ...] | None:
    return _scope.get()


def allows(config: ModelConfig) -> bool:
    """Whether the current request may use (and see) the model of ``config``."""
    return in_scope(_scope.get(), config.names)


def allows_name(name: str) -> bool:
    """Whether the current request may use a model known as ``name`` (a peer's)."""
    return in_scope(_scope.get(), (name,))
