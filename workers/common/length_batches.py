"""Rows of token ids from many requests, taken into padded forward passes.

Encoder kinds (embeddings, rerank) queue every row of every request in one queue,
each request's rows shortest first (neighbours then pad to similar lengths), and
take them in arrival order while the padded batch (rows times the longest row) stays within
``max_batch_tokens``. One row longer than that still runs, alone. Rows are padded
on the right: every token keeps the position it has alone, and causal models never
see padding before a token.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import numpy as np


class Row(Protocol):
    @property
    def length(self) -> int: ...


R = TypeVar("R", bound=Row)


def shortest_first(lengths: Sequence[int]) -> list[int]:
    """The indices of ``lengths`` in the order their rows should be queued."""
    return sorted(range(len(lengths)), key=lambda i: lengths[i])


def take_batch(queue: deque[R], max_batch_tokens: int, alive: Callable[[R], bool]) -> list[R]:
    """The next batch from ``queue``: rows in order while the padded size stays within
    ``max_batch_tokens``; at least one row. Rows whose request is gone (``alive``
    false: cancelled or failed) are dropped on the way."""
    batch: list[R] = []
    longest = 0
    while queue:
        row = queue[0]
        if not alive(row):
            queue.popleft()
            continue
        width = max(longest, row.length)
        if batch and width * (len(batch) + 1) > max_batch_tokens:
            break
        batch.append(queue.popleft())
        longest = width
    return batch


def pad_right(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` as one int32 matrix padded on the right with ``pad_id``, and the
    attention mask (1 on real tokens)."""
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int32)
    mask = np.zeros((len(rows), width), dtype=np.int32)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


def pad_values(rows: Sequence[Sequence[int]], fill: int = 0) -> np.ndarray:
    """Per-token values (token type ids) padded on the right like :func:`pad_right`."""
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), fill, dtype=np.int32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out
