"""Dropping finished rows from mlx-lm's batch KV cache without waiting for the device.

When sequences of a batch end, ``BatchGenerator`` drops their rows from every
layer's ``BatchKVCache`` (``filter``). mlx-lm's ``filter`` then reads the smallest
left padding of the rows it keeps, with ``tolist()`` on a newly indexed array. That
array is queued on the generation stream behind the decode step already in flight,
so the read waits for that step, and the next step is built only once the device
has gone idle: the overlap of Python and device work that the batch otherwise keeps
is lost at every step where a sequence ends. With answers of different lengths
(a real mix of requests) that is most steps.

The left paddings are a few integers, already computed by an earlier step (or made
from a Python list). :func:`filter_rows` reads them as they are, takes the kept
rows' values in Python and gives the cache a new array of them, so nothing waits;
keys, values and offsets are indexed lazily, as in mlx-lm. :func:`install` puts it
in place of mlx-lm's method, after checking on a small cache that both leave the
same state behind; when they differ (another mlx-lm), mlx-lm's method stays and a
warning says so. :func:`library_method` brings mlx-lm's own back for a while (the
in-process baselines of the benchmarks).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache

log = logging.getLogger(__name__)

LIBRARY_FILTER: Callable[[BatchKVCache, Any], None] = BatchKVCache.filter
"""mlx-lm's own ``BatchKVCache.filter``, as imported."""


def filter_rows(cache: BatchKVCache, batch_indices: Any) -> None:
    """Keep the rows ``batch_indices`` (a list of row numbers) of ``cache``, in that
    order, and drop the columns of left padding that every kept row has. Any other
    kind of index goes to mlx-lm's method."""
    if not isinstance(batch_indices, list) or not batch_indices:
        LIBRARY_FILTER(cache, batch_indices)
        return
    rows = batch_indices
    # Computed by an earlier step or made from a list: no wait (except in the step
    # right after a join, whose concatenated paddings the step in flight computes).
    padding = cast(list[int], cache.left_padding.tolist())
    kept = [padding[row] for row in rows]
    shift = min(kept)
    if cache.keys is not None:
        cache.keys = cache.keys[rows]
        cache.values = cache.values[rows]
        if shift > 0:
            cache.keys = cache.keys[..., shift:, :]
            cache.values = cache.values[..., shift:, :]
    cache.offset = cache.offset[rows]
    cache._idx -= shift
    cache.left_padding = mx.array([p - shift for p in kept])


def _probe_cache(left_padding: list[int], length: int) -> BatchKVCache:
    """A small cache with deterministic keys and values after ``length`` steps."""
    cache = BatchKVCache(left_padding)
    rows = len(left_padding)
    keys = mx.arange(rows * 2 * length * 4, dtype=mx.float32).reshape(rows, 2, length, 4)
    cache.update_and_fetch(keys, -keys)
    return cache


def _state(cache: BatchKVCache) -> tuple[Any, ...]:
    keys, values = cache.keys_and_values()
    return (
        keys.tolist(),
        values.tolist(),
        cache.offset.tolist(),
        cache.left_padding.tolist(),
        cache._idx,
    )


def same_as_library() -> bool:
    """Do :func:`filter_rows` and mlx-lm's method leave the same state behind (keys,
    values, offsets, left paddings, length) on small caches?"""
    cases = [([3, 0, 5, 2], [0, 2, 3]), ([3, 0, 5, 2], [2, 0]), ([1, 1], [1]), ([0, 4], [0, 1])]
    for padding, rows in cases:
        ours, theirs = _probe_cache(padding, 6), _probe_cache(padding, 6)
        filter_rows(ours, list(rows))
        LIBRARY_FILTER(theirs, list(rows))
        if _state(ours) != _state(theirs):
            return False
    return True


def install() -> bool:
    """Use :func:`filter_rows` for every ``BatchKVCache`` of this process, if it
    behaves as mlx-lm's method does here; True when it is in place. Runs MLX work:
    call it on the thread (and stream) that generates."""
    if BatchKVCache.filter is filter_rows:
        return True
    try:
        same = same_as_library()
    except Exception:
        log.warning("checking the batch cache filter failed; mlx-lm's is kept", exc_info=True)
        return False
    if not same:
        log.warning(
            "this mlx-lm's BatchKVCache.filter leaves another state than filter_rows; "
            "its own (which waits for the device when a sequence ends) is kept"
        )
        return False
    BatchKVCache.filter = filter_rows  # type: ignore[method-assign]
    return True


@contextmanager
def library_method() -> Iterator[None]:
    """mlx-lm's own ``BatchKVCache.filter`` while the block runs."""
    current = BatchKVCache.filter
    BatchKVCache.filter = LIBRARY_FILTER  # type: ignore[method-assign]
    try:
        yield
    finally:
        BatchKVCache.filter = current  # type: ignore[method-assign]
