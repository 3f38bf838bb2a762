"""Stored responses of the Responses API: ``previous_response_id``, GET and DELETE.

Kept in the gateway's memory, so a restart forgets them. Each entry holds the
response object as sent (for ``GET /v1/responses/{id}``), its input items, and the
whole conversation up to and including its output as chat messages (what a
request naming it as ``previous_response_id`` continues from). Entries expire
``ttl`` seconds after they were stored, and the oldest go first when the store
holds more than ``max_bytes`` of them; an entry larger than that on its own is
not stored (naming it later is a 404, as for an expired one). A
:class:`~mlx_gateway.supervisor.http.ttl_store.TtlStore`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from mlx_gateway.supervisor.http.ttl_store import TtlStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredResponse:
    response: dict[str, Any]
    input_items: list[dict[str, Any]]
    conversation: list[dict[str, Any]]
    """The chat messages up to and including this response's output (no instructions)."""


class ResponseStore(TtlStore[StoredResponse]):
    """A TTL- and byte-capped map of response id → :class:`StoredResponse`."""

    def __init__(
        self, ttl: float, max_bytes: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(max_bytes=max_bytes, ttl=ttl, clock=clock)

    def put(
        self,
        response: dict[str, Any],
        input_items: list[dict[str, Any]],
        conversation: list[dict[str, Any]],
    ) -> bool:
        """Store a response under ``response["id"]``; False when it is too large."""
        size = sum(len(msgspec.json.encode(x)) for x in (response, input_items, conversation))
        entry = StoredResponse(response, input_items, conversation)
        if self.keep(response["id"], entry, size):
            return True
        logger.warning(
            "response %s (%d bytes) is larger than the whole store (%d bytes): not stored",
            response["id"],
            size,
            self.max_bytes,
        )
        return False
