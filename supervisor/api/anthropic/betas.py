"""The ``anthropic-beta`` header: the betas a request declares, and what they allow.

Most betas ask for features this gateway has no counterpart for (prompt-caching
scopes, context management, token-efficient tools…); they are accepted and, like
the body fields that go with them, ignored. The tool betas (``mcp-client-*``,
``web-fetch-*``, ``advanced-tool-use-2025-11-20`` for tool search) need no check:
their tools are served with or without them. One changes what a valid request is:

``mid-conversation-system-<date>``
    lets ``messages`` hold ``{"role": "system", …}`` entries (Claude Code declares
    it and sends them, e.g. the list of its agent types, for model names it does
    not know). Without it a system message there is a 400 that names the beta.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.datastructures import Headers

from mlx_gateway.supervisor.api.anthropic.schemas import AnthropicMessage
from mlx_gateway.supervisor.errors import BadRequest

MID_CONVERSATION_SYSTEM = "mid-conversation-system-2026-04-07"
"""The beta Claude Code declares (2.1.x); any ``mid-conversation-system-*`` counts."""
_MID_CONVERSATION_PREFIX = "mid-conversation-system-"


def declared(headers: Headers) -> set[str]:
    """The betas of every ``anthropic-beta`` header (comma-separated lists)."""
    betas: set[str] = set()
    for value in headers.getlist("anthropic-beta"):
        betas.update(name.strip() for name in value.split(",") if name.strip())
    return betas


def allows_system_messages(betas: set[str]) -> bool:
    return any(name.startswith(_MID_CONVERSATION_PREFIX) for name in betas)


def check_roles(messages: Sequence[AnthropicMessage], betas: set[str]) -> None:
    """A 400 for a ``system`` message in ``messages`` unless its beta is declared."""
    if allows_system_messages(betas):
        return
    for i, message in enumerate(messages):
        if message.role == "system":
            raise BadRequest(
                f"Invalid enum value 'system' - at `$.messages[{i}].role`: a system message "
                "inside messages needs the beta header "
                f"'anthropic-beta: {MID_CONVERSATION_SYSTEM}'; send that header, or move "
                "the text to the top-level 'system' field.",
                param=f"messages[{i}].role",
            )
