"""Who is calling: the app a request's key belongs to.

The auth middleware puts a :class:`Caller` on the ASGI scope (``scope["state"]
["caller"]``) once it has accepted the key; everything after it (the model scope
checks, the scheduler's priority, usage records, tool-call logs) reads it with
:func:`caller_of` and never looks at the key again. A gateway without keys, and any
request that reaches code before the middleware ran, is :data:`ANONYMOUS`. A key of
the ``api_keys`` / ``admin_keys`` shorthand is an app named ``key-<fp>`` /
``admin-<fp>`` (:mod:`.keyring`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from starlette.types import Scope

from mlx_gateway.supervisor.config.apps import in_scope

Role = Literal["client", "admin", "read-only"]
Priority = Literal["interactive", "batch"]


@dataclass(frozen=True, slots=True)
class Caller:
    """One app (an entry of ``server.keys``, or a key of the ``api_keys`` /
    ``admin_keys`` shorthand)."""

    name: str
    """The app's name in logs and usage (never the key)."""
    role: Role = "client"
    priority: Priority = "interactive"
    models: tuple[str, ...] | None = None
    """Served names or globs this app may use; ``None``: all of them."""
    tools: tuple[str, ...] | None = None
    """The tools the gateway runs that this app may use (MCP server labels,
    ``web_search``, ``web_fetch``, ``mcp_url``, globs); ``None``: all of them."""
    fingerprint: str = "-"
    """The first 8 hex digits of the key's SHA-256 (``-`` without a key)."""

    def allows(self, model: str) -> bool:
        """Whether ``model`` (a served name or alias) is within this app's scope."""
        return in_scope(self.models, (model,))

    def may_use(self, tool: str) -> bool:
        """Whether the server tool ``tool`` (its scope name) is within this app's scope."""
        return in_scope(self.tools, (tool,))


ANONYMOUS = Caller(name="anonymous")
SCOPE_KEY = "caller"


def caller_of(scope: Scope) -> Caller:
    """The caller the auth middleware recorded on ``scope``, else :data:`ANONYMOUS`."""
    state = scope.get("state")
    if isinstance(state, dict):
        found = state.get(SCOPE_KEY)
        if isinstance(found, Caller):
            return found
    return ANONYMOUS


def set_caller(scope: Scope, caller: Caller) -> None:
    """Record ``caller`` on ``scope`` (the auth middleware, once the key passed)."""
    scope.setdefault("state", {})[SCOPE_KEY] = caller
