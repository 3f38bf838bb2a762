"""Generated images kept in memory for ``response_format: url``, bounded and expiring.

Each image gets an unguessable id; ``GET /v1/images/files/{id}.{ext}`` serves it
until ``ttl`` seconds after it was stored. The store holds at most ``max_bytes``:
storing more drops expired images first, then the oldest ones. Expired entries are
dropped whenever the store is touched, so no timer task is needed. Pure: the clock
is injectable and nothing here does I/O.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class StoredImage:
    data: bytes
    media_type: str
    expires: float
    """On the store's clock."""


class ImageStore:
    """``put`` images, ``get`` them back by id until they expire."""

    def __init__(
        self, max_bytes: int, ttl: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.max_bytes = max_bytes
        self.ttl = ttl
        self._clock = clock
        self._items: OrderedDict[str, StoredImage] = OrderedDict()  # oldest first
        self._bytes = 0

    def put(self, data: bytes, media_type: str) -> str:
        """Store ``data``; returns its id. An image larger than the whole store is
        still kept (alone) so that the response can link to it."""
        self._expire()
        while self._items and self._bytes + len(data) > self.max_bytes:
            self._drop(next(iter(self._items)))
        key = secrets.token_urlsafe(18)
        self._items[key] = StoredImage(data, media_type, self._clock() + self.ttl)
        self._bytes += len(data)
        return key

    def get(self, key: str) -> StoredImage | None:
        """The image, or ``None`` when unknown or expired."""
        self._expire()
        return self._items.get(key)

    def remaining(self, item: StoredImage) -> float:
        """Seconds until ``item`` expires."""
        return max(0.0, item.expires - self._clock())

    @property
    def size(self) -> int:
        """Bytes held now."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def _expire(self) -> None:
        now = self._clock()
        # Every entry has the same ttl, so insertion order is expiry order.
        while self._items:
            key, item = next(iter(self._items.items()))
            if item.expires > now:
                break
            self._drop(key)

    def _drop(self, key: str) -> None:
        item = self._items.pop(key)
        self._bytes -= len(item.data)
