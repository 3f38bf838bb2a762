"""A request's priority: its caller's (``server.keys``' ``priority`` of the app its
key belongs to, see :mod:`...http.caller`), lowered to ``batch`` by the OpenAI field
``service_tier: "flex"``. A request can lower its key's priority, never raise it:
``"default"``, ``"auto"``, ``"priority"`` or ``"scale"`` leave it as the key's."""

from __future__ import annotations

from starlette.requests import HTTPConnection

from mlx_gateway.protocol.messages import BATCH, Priority
from mlx_gateway.supervisor.http.caller import caller_of

FLEX = "flex"
"""The ``service_tier`` that makes a request batch work."""


def priority_of(request: HTTPConnection, service_tier: str | None = None) -> Priority:
    """The priority ``request`` runs at (see module doc)."""
    if service_tier == FLEX:
        return BATCH
    return caller_of(request.scope).priority
