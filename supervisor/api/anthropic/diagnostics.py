"""Anthropic's cache diagnostics (beta ``cache-diagnosis-2026-04-07``): why a prompt
read less from the cache than the request it follows left there.

A request with ``diagnostics: {"previous_message_id": "msg_…"}`` gets
``diagnostics: {"cache_miss_reason": …}`` in its message (on ``message_start`` when
streamed): ``null`` when it read what that message's request left in the cache, else
``{"type", "cache_missed_input_tokens"}`` with the API's types:

``model_changed`` / ``system_changed`` / ``tools_changed``
    the model, the system prompt (less Claude Code's billing block, which is not
    prompt) or the tools differ from that request's;
``messages_changed``
    that request's messages are not the start of this one's (a history rewritten);
``previous_message_not_found``
    no message of that id was answered here (or it fell out of the store);
``unavailable``
    the request extends that one, yet read less from the cache (its entry was
    evicted, or the model's worker restarted).

``cache_missed_input_tokens``: that request's prompt tokens that this one did not
read from the cache. Each answered message is remembered by id as digests of its
request's parts (:class:`~...engine.message_digests.MessageDigests`, bounded,
in memory).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from mlx_gateway.supervisor.api.anthropic.convert import system_text
from mlx_gateway.supervisor.api.anthropic.schemas import MessagesRequest
from mlx_gateway.supervisor.engine.message_digests import (
    AnsweredMessage,
    MessageDigests,
    RequestDigest,
)
from mlx_gateway.supervisor.engine.prompt_parts import digest


def request_digest(req: MessagesRequest) -> RequestDigest:
    return RequestDigest(
        model=req.model,
        system=digest(system_text(req.system)),
        tools=digest(msgspec.to_builtins(req.tools or [])),
        messages=tuple(digest(msgspec.to_builtins(m)) for m in req.messages),
    )


def miss_reason(
    previous: AnsweredMessage | None, now: RequestDigest, cached_tokens: int
) -> dict[str, Any] | None:
    """The ``cache_miss_reason`` of a request that follows ``previous``."""
    if previous is None:
        return {"type": "previous_message_not_found", "cache_missed_input_tokens": 0}
    before = previous.request
    missed = max(0, previous.prompt_tokens - cached_tokens)
    if before.model != now.model:
        kind = "model_changed"
    elif before.system != now.system:
        kind = "system_changed"
    elif before.tools != now.tools:
        kind = "tools_changed"
    elif now.messages[: len(before.messages)] != before.messages:
        kind = "messages_changed"
    elif missed:
        kind = "unavailable"
    else:
        return None
    return {"type": kind, "cache_missed_input_tokens": missed}


@dataclass
class Diagnosis:
    """One request's side of the diagnostics: what it is, what it follows, and
    whether it asked (``previous_id`` ``None`` and ``asked`` true: the first turn)."""

    store: MessageDigests
    request: RequestDigest
    asked: bool
    previous_id: str | None = None

    def answer(self, message_id: str, prompt_tokens: int, cached_tokens: int) -> dict[str, Any]:
        """The message's ``diagnostics`` (remembering this request under its id)."""
        self.store.remember(message_id, self.request, prompt_tokens)
        if self.previous_id is None:
            return {"cache_miss_reason": None}
        previous = self.store.get(self.previous_id)
        return {"cache_miss_reason": miss_reason(previous, self.request, cached_tokens)}

    def remember(self, message_id: str, prompt_tokens: int) -> None:
        self.store.remember(message_id, self.request, prompt_tokens)
