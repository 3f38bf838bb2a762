"""Generated images kept in memory for ``response_format: url``, bounded and expiring.

Each image gets an unguessable id; ``GET /v1/images/files/{id}.{ext}`` serves it
until ``ttl`` seconds after it was stored. The store holds at most ``max_bytes``:
storing more drops expired images first, then the oldest ones (a
:class:`~mlx_gateway.supervisor.http.ttl_store.TtlStore`).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from mlx_gateway.supervisor.http.ttl_store import TtlStore


@dataclass(frozen=True)
class StoredImage:
    data: bytes
    media_type: str


class ImageStore(TtlStore[StoredImage]):
    """``put`` images, ``get`` them back by id until they expire."""

    def __init__(
        self, max_bytes: int, ttl: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(max_bytes=max_bytes, ttl=ttl, clock=clock, keep_oversized=True)

    def put(self, data: bytes, media_type: str) -> str:
        """Store ``data``; returns its id. An image larger than the whole store is
        still kept (alone) so that the response can link to it."""
        key = secrets.token_urlsafe(18)
        self.keep(key, StoredImage(data, media_type), len(data))
        return key
