"""Where a prompt left the prompt cache: a request's parts, compared with the model's
recent prompts.

A language model's worker reuses the longest token prefix a cached prompt shares
with a new one (``cached_tokens``). When that is less than a conversation's earlier
turn left, the cause is in the request: a part before the new turn changed. The
gateway cannot map tokens to parts (only the worker's tokenizer and chat template
could), but it can compare parts: each request is cut into its tools (rendered into
the opening system turn by the templates) and its messages, each part hashed; the
recent prompt of the same model that shares the most leading parts names the first
part that differs. So a log line can say "left a cached prompt in ``system``" or
"in ``messages[3]``" where a client rewrote its history.

Pure functions and a bounded in-memory history (:class:`PromptHistory`); nothing of a
prompt is kept but 8-byte digests.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

HISTORY_PER_MODEL = 32
"""Recent prompts remembered per model (about as many as its prompt cache keeps)."""
MODELS = 256
"""Most models remembered (a gateway serves fewer; routes and peers add names)."""


def digest(value: Any) -> bytes:
    """A short, stable hash of a JSON-like value."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


@dataclass(frozen=True)
class PromptParts:
    """A prompt as labelled parts, in the order a chat template renders them."""

    labels: tuple[str, ...]
    digests: tuple[bytes, ...]

    def shared(self, other: PromptParts) -> int:
        """How many leading parts the two prompts have in common."""
        count = 0
        for a, b, la, lb in zip(
            self.digests, other.digests, self.labels, other.labels, strict=False
        ):
            if a != b or la != lb:
                break
            count += 1
        return count


def parts_of(
    messages: Sequence[dict[str, Any]],
    tools: Sequence[Any] = (),
    labels: Sequence[str] | None = None,
) -> PromptParts:
    """The parts of a chat request: ``tools`` (when there are any) then each message,
    labelled ``messages[i]`` unless the surface gives its own ``labels`` (one per
    message: Anthropic's ``system`` and ``messages[i]`` of its own request)."""
    names: list[str] = []
    digests: list[bytes] = []
    if tools:
        names.append("tools")
        digests.append(digest(list(tools)))
    for i, message in enumerate(messages):
        names.append(labels[i] if labels is not None and i < len(labels) else f"messages[{i}]")
        digests.append(digest(message))
    return PromptParts(tuple(names), tuple(digests))


@dataclass(frozen=True)
class CacheMiss:
    """A prompt that left the recent prompt it shared the most with: ``part`` is the
    first part that differs (``None``: this prompt has fewer parts, ending inside)."""

    part: str | None
    shared_parts: int


class PromptHistory:
    """The parts of the recent prompts of each model."""

    def __init__(self, per_model: int = HISTORY_PER_MODEL, models: int = MODELS) -> None:
        self.per_model = per_model
        self.models = models
        self._recent: OrderedDict[str, deque[PromptParts]] = OrderedDict()

    def note(self, model: str, parts: PromptParts) -> CacheMiss | None:
        """Remember ``parts`` for ``model``; the :class:`CacheMiss` when it left a recent
        prompt early (it shares some leading parts with one, but not all of that
        one's, or only its first part differs: other tools before the same system
        prompt), ``None`` when it extends the closest one, repeats it or shares
        nothing."""
        recent = self._recent.get(model)
        if recent is None:
            recent = self._recent[model] = deque(maxlen=self.per_model)
            while len(self._recent) > self.models:
                self._recent.popitem(last=False)
        self._recent.move_to_end(model)
        best, shared = None, 0
        for earlier in reversed(recent):  # newest first: a tie goes to the recent one
            count = parts.shared(earlier)
            if count > shared:
                best, shared = earlier, count
        if best is None:
            best = next((e for e in reversed(recent) if _first_differs(parts, e)), None)
        recent.append(parts)
        if best is None or shared >= len(best.labels):
            return None
        part = parts.labels[shared] if shared < len(parts.labels) else None
        return CacheMiss(part, shared)


def _first_differs(a: PromptParts, b: PromptParts) -> bool:
    """Only the first part of the two differs, the second is the same (the tools
    changed before the same system prompt)."""
    return (
        len(a.labels) > 1
        and len(b.labels) > 1
        and a.labels[:2] == b.labels[:2]
        and a.digests[0] != b.digests[0]
        and a.digests[1] == b.digests[1]
    )
