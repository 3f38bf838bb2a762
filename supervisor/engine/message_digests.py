"""The Messages requests answered lately, by message id, as digests of their parts:
what Anthropic's cache diagnostics (``cache_miss_reason``) compare a request
with. Bounded (an LRU), in the gateway's memory.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

REMEMBERED = 4096
"""Messages whose requests are remembered (a few hours of a busy agent's turns)."""


@dataclass(frozen=True)
class RequestDigest:
    """A Messages request as digests of its parts."""

    model: str
    system: bytes
    tools: bytes
    messages: tuple[bytes, ...]


@dataclass(frozen=True)
class AnsweredMessage:
    request: RequestDigest
    prompt_tokens: int


class MessageDigests:
    """The requests of the messages answered lately, by message id (LRU)."""

    def __init__(self, size: int = REMEMBERED) -> None:
        self.size = size
        self._by_id: OrderedDict[str, AnsweredMessage] = OrderedDict()

    def remember(self, message_id: str, request: RequestDigest, prompt_tokens: int) -> None:
        self._by_id[message_id] = AnsweredMessage(request, prompt_tokens)
        self._by_id.move_to_end(message_id)
        while len(self._by_id) > self.size:
            self._by_id.popitem(last=False)

    def get(self, message_id: str) -> AnsweredMessage | None:
        return self._by_id.get(message_id)
