"""A bounded, expiring map kept in the gateway's memory (a restart forgets it).

The one store behind the image URLs and the stored responses. Each entry expires
``ttl`` seconds after it was kept; the store holds at most ``max_bytes`` (by the size
each entry was kept with), and keeping more drops the oldest entries first. Expired
entries are dropped whenever the store is touched, so no timer task is needed.
Pure: the clock is injectable and nothing here does I/O.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

V = TypeVar("V")


@dataclass(frozen=True)
class _Entry(Generic[V]):
    value: V
    size: int
    expires: float
    """On the store's clock."""


class TtlStore(Generic[V]):
    """``keep`` values under keys, ``get`` them back until they expire.

    An entry larger than the whole store is refused, unless ``keep_oversized``:
    then it is kept alone (everything else is dropped for it)."""

    def __init__(
        self,
        *,
        max_bytes: int,
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
        keep_oversized: bool = False,
    ) -> None:
        self.max_bytes = max_bytes
        self.ttl = ttl
        self.keep_oversized = keep_oversized
        self._clock = clock
        self._entries: OrderedDict[str, _Entry[V]] = OrderedDict()  # oldest first
        self.bytes = 0
        """Bytes held now."""

    def keep(self, key: str, value: V, size: int) -> bool:
        """Keep ``value`` (``size`` bytes) under ``key``, replacing what was there;
        False when it is larger than the whole store and was refused."""
        self._expire()
        if size > self.max_bytes and not self.keep_oversized:
            return False
        self.delete(key)
        while self._entries and self.bytes + size > self.max_bytes:
            self._drop(next(iter(self._entries)))
        self._entries[key] = _Entry(value, size, self._clock() + self.ttl)
        self.bytes += size
        return True

    def get(self, key: str) -> V | None:
        """The value, or ``None`` when unknown or expired."""
        self._expire()
        entry = self._entries.get(key)
        return entry.value if entry is not None else None

    def expires_in(self, key: str) -> float:
        """Seconds until ``key`` expires (0 when it is gone)."""
        entry = self._entries.get(key)
        return max(0.0, entry.expires - self._clock()) if entry is not None else 0.0

    def delete(self, key: str) -> bool:
        """Drop ``key``; False when it was not there."""
        if key not in self._entries:
            return False
        self._drop(key)
        return True

    def __len__(self) -> int:
        return len(self._entries)

    def _expire(self) -> None:
        now = self._clock()
        # Every entry has the same ttl, so the order they were kept in is expiry order.
        while self._entries:
            key, entry = next(iter(self._entries.items()))
            if entry.expires > now:
                return
            self._drop(key)

    def _drop(self, key: str) -> None:
        self.bytes -= self._entries.pop(key).size
