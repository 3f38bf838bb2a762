"""Stored responses of the Responses API: ``previous_response_id``, GET and DELETE.

Kept in the gateway's memory, so a restart forgets them. Each entry holds the
response object as sent (for ``GET /v1/responses/{id}``), its input items, and the
whole conversation up to and including its output as chat messages (what a
request naming it as ``previous_response_id`` continues from). Entries expire
``ttl`` seconds after they were stored, and the oldest go first when the store
holds more than ``max_bytes`` of them; an entry larger than that on its own is
not stored (naming it later is a 404, as for an expired one).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredResponse:
    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    conversation: list[dict[str, Any]]
    """The chat messages up to and including this response's output (no instructions)."""
    stored_at: float
    size: int


class ResponseStore:
    """A TTL- and byte-capped map of response id → :class:`StoredResponse`."""

    def __init__(
        self, ttl: float, max_bytes: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.max_bytes = max_bytes
        self._clock = clock
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(
        self,
        response: dict[str, Any],
        input_items: list[dict[str, Any]],
        conversation: list[dict[str, Any]],
    ) -> bool:
        """Store a response under ``response["id"]``; False when it is too large."""
        size = sum(len(msgspec.json.encode(x)) for x in (response, input_items, conversation))
        self._expire()
        if size > self.max_bytes:
            logger.warning(
                "response %s (%d bytes) is larger than the whole store (%d bytes): not stored",
                response["id"],
                size,
                self.max_bytes,
            )
            return False
        self.delete(response["id"])
        while self._entries and self.bytes + size > self.max_bytes:
            self._drop(next(iter(self._entries)))
        entry = StoredResponse(response, input_items, conversation, self._clock(), size)
        self._entries[response["id"]] = entry
        self.bytes += size
        return True

    def get(self, response_id: str) -> StoredResponse | None:
        self._expire()
        return self._entries.get(response_id)

    def delete(self, response_id: str) -> bool:
        if response_id not in self._entries:
            return False
        self._drop(response_id)
        return True

    def _drop(self, response_id: str) -> None:
        entry = self._entries.pop(response_id)
        self.bytes -= entry.size

    def _expire(self) -> None:
        # Entries are kept in the order they were stored, so the expired ones lead.
        deadline = self._clock() - self.ttl
        while self._entries:
            oldest_id, oldest = next(iter(self._entries.items()))
            if oldest.stored_at > deadline:
                return
            self._drop(oldest_id)
