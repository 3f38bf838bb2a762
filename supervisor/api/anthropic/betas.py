"""The ``anthropic-beta`` header: the betas a request declares.

Betas ask for features this gateway either serves whatever the header says (the tool
betas: ``mcp-client-*``, ``web-fetch-*``, ``advanced-tool-use-*`` for tool search;
``mid-conversation-*``, under which ``messages`` may hold ``{"role": "system", …}``
entries) or has no counterpart for (prompt-caching scopes, context management,
token-efficient tools…): those are accepted and, like the body fields that go with
them, ignored. None of them changes what a valid request is: a ``system`` message
inside ``messages`` is templated where it stands with any beta or none, since the
clients that send one have changed the beta they declare with it (Claude Code
declared ``mid-conversation-system-2026-04-07`` up to 2.1.2xx and
``mid-conversation-tool-changes-2026-07-01`` since) and the API answers both.
"""

from __future__ import annotations

from starlette.datastructures import Headers

CACHE_DIAGNOSIS = "cache-diagnosis-2026-04-07"
"""The beta of the request field ``diagnostics`` (cache-miss reasons); the field is
answered with it or without it."""


def declared(headers: Headers) -> set[str]:
    """The betas of every ``anthropic-beta`` header (comma-separated lists)."""
    betas: set[str] = set()
    for value in headers.getlist("anthropic-beta"):
        betas.update(name.strip() for name in value.split(",") if name.strip())
    return betas
