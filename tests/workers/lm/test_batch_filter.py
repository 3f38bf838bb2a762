"""The lm worker's ``BatchKVCache.filter`` (no wait for the device) against mlx-lm's
own: the same cache state on random filters, the same greedy tokens from a real
``BatchGenerator`` on the tiny llama, and mlx-lm's kept when the two disagree."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import load
from mlx_lm.generate import BatchGenerator
from mlx_lm.models.cache import BatchKVCache
from mlx_lm.sample_utils import make_sampler

from mlx_gateway.workers.lm import batch_filter
from mlx_gateway.workers.lm.batch_filter import LIBRARY_FILTER, filter_rows


def _cache(padding: list[int], steps: list[int], seed: int) -> BatchKVCache:
    """A cache after prefill-like updates of ``steps`` columns each (none: empty)."""
    cache = BatchKVCache(padding)
    rng = mx.random.key(seed)
    for length in steps:
        rng, key = mx.random.split(rng)
        keys = mx.random.normal((len(padding), 2, length, 8), key=key)
        cache.update_and_fetch(keys, keys * 2)
    return cache


def _state(cache: BatchKVCache) -> tuple[Any, ...]:
    if cache.keys is None:
        keys = values = None
    else:
        k, v = cache.keys_and_values()
        keys, values = k.tolist(), v.tolist()
    return keys, values, cache.offset.tolist(), cache.left_padding.tolist(), cache._idx


def test_filter_rows_leaves_the_state_mlx_lm_leaves() -> None:
    rng = random.Random(7)
    shifted = 0
    for case in range(60):
        rows = rng.randint(1, 6)
        padding = [rng.randint(0, 5) for _ in range(rows)]
        steps = [] if case % 10 == 0 else [rng.randint(6, 12), 1, 1][: rng.randint(1, 3)]
        keep = rng.sample(range(rows), rng.randint(1, rows))  # any order, as mlx-lm allows
        ours, theirs = _cache(padding, steps, case), _cache(padding, steps, case)
        filter_rows(ours, list(keep))
        LIBRARY_FILTER(theirs, list(keep))
        assert _state(ours) == _state(theirs), (padding, steps, keep)
        shifted += min(padding[k] for k in keep) > 0
    assert shifted >= 10  # the columns every kept row pads were dropped in many cases


def test_filtering_twice_and_extending_match_mlx_lm() -> None:
    ours, theirs = _cache([2, 0, 4], [8], 1), _cache([2, 0, 4], [8], 1)
    for cache, method in ((ours, filter_rows), (theirs, LIBRARY_FILTER)):
        method(cache, [0, 2])
        cache.update_and_fetch(*(mx.ones((2, 2, 1, 8)),) * 2)
        cache.extend(_cache([1], [3], 2))
        method(cache, [2, 1])
    assert _state(ours) == _state(theirs)


def test_install_keeps_mlx_lm_method_when_the_states_differ(monkeypatch) -> None:
    monkeypatch.setattr(BatchKVCache, "filter", LIBRARY_FILTER)

    def no_shift(cache: BatchKVCache, rows: list[int]) -> None:
        """A filter that keeps the padding columns: another state than filter_rows."""
        if cache.keys is not None:
            cache.keys, cache.values = cache.keys[rows], cache.values[rows]
        cache.offset, cache.left_padding = cache.offset[rows], cache.left_padding[rows]

    monkeypatch.setattr(batch_filter, "LIBRARY_FILTER", no_shift)
    assert not batch_filter.same_as_library()
    assert batch_filter.install() is False
    assert BatchKVCache.filter is LIBRARY_FILTER

    monkeypatch.setattr(batch_filter, "LIBRARY_FILTER", LIBRARY_FILTER)
    assert batch_filter.install() is True
    assert BatchKVCache.filter is filter_rows
    with batch_filter.library_method():
        assert BatchKVCache.filter is LIBRARY_FILTER
    assert BatchKVCache.filter is filter_rows


def _generate(model: Any, prompts: list[list[int]], budgets: list[int]) -> dict[int, list[int]]:
    generator = BatchGenerator(
        model, completion_batch_size=len(prompts), sampler=make_sampler(temp=0.0)
    )
    uids = generator.insert(prompts, max_tokens=budgets)
    tokens: dict[int, list[int]] = {uid: [] for uid in uids}
    running = set(uids)
    while running:
        _, responses = generator.next()
        for response in responses:
            tokens[response.uid].append(response.token)
            if response.finish_reason is not None:
                running.discard(response.uid)
    generator.close()
    return {i: tokens[uid] for i, uid in enumerate(uids)}


@pytest.mark.slow
def test_batch_generator_makes_the_same_tokens_with_either_filter(
    tiny_lm_path: Path, monkeypatch
) -> None:
    model, tokenizer = load(str(tiny_lm_path))[:2]
    text = "the quick brown fox jumps over the lazy dog again and again"
    words = text.split()
    # Prompts of different lengths (left padding); the longest ends first, so the
    # rows left all pad and the filter drops columns.
    prompts = [tokenizer.encode(" ".join(words[: 3 + 2 * i])) for i in range(5)]
    budgets = [30, 24, 17, 9, 5]
    shifts: list[int] = []

    def counted(cache: BatchKVCache, rows: Any) -> None:
        shifts.append(min(cache.left_padding.tolist()[r] for r in rows))
        filter_rows(cache, rows)

    with batch_filter.library_method():
        theirs = _generate(model, prompts, budgets)
    monkeypatch.setattr(BatchKVCache, "filter", counted)
    ours = _generate(model, prompts, budgets)
    assert ours == theirs
    assert [len(ours[i]) for i in range(5)] == budgets
    assert any(shift > 0 for shift in shifts)
