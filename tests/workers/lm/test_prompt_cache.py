"""workers/prompt_cache.py on real mlx-lm cache objects (no model needed)."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import KVCache, RotatingKVCache

from mlx_gateway.workers.lm.prompt_cache import PromptCache, common_prefix, token_bytes


def kv_cache(tokens: int, layers: int = 2, fill: float = 1.0) -> list[KVCache]:
    """A plain KV cache holding ``tokens`` positions (2 heads of 4 dims)."""
    caches = []
    for _ in range(layers):
        # Exactly `tokens` long, as the caches the batch hands back are.
        cache = KVCache()
        cache.keys = mx.full((1, 2, tokens, 4), fill)
        cache.values = cache.keys + 1
        cache.offset = tokens
        caches.append(cache)
    return caches


def rotating_cache(tokens: int) -> list[RotatingKVCache]:
    cache = RotatingKVCache(max_size=64)
    keys = mx.ones((1, 2, tokens, 4))
    cache.update_and_fetch(keys, keys)
    return [cache]


def test_common_prefix_counts_tokens() -> None:
    a = token_bytes([3, 89, 87, 271, 203, 20])
    assert common_prefix(a, token_bytes([3, 89, 87, 271, 203, 25, 1])) == 5
    assert common_prefix(a, a) == 6
    assert common_prefix(a, token_bytes([])) == 0
    assert common_prefix(token_bytes([70000, 1]), token_bytes([70001, 1])) == 0
    long = list(range(5000))
    assert common_prefix(token_bytes(long), token_bytes([*long[:4321], -1 & 0xFFFF])) == 4321


def test_longest_prefix_wins_and_leaves_one_token_to_prefill() -> None:
    store = PromptCache(max_bytes=10**9, max_entries=8)
    store.store([1, 2, 3, 4, 5, 6], kv_cache(6))
    store.store([1, 2, 9, 9], kv_cache(4))
    hit = store.fetch([1, 2, 3, 4, 7])
    assert hit is not None and hit.tokens == 4
    assert all(layer.offset == 4 for layer in hit.cache)
    whole = store.fetch([1, 2, 3, 4, 5, 6])
    assert whole is not None and whole.tokens == 5  # the last token is prefilled again
    assert store.fetch([8, 8, 8]) is None


def test_a_hit_is_a_view_that_leaves_the_entry_intact() -> None:
    store = PromptCache(max_bytes=10**9, max_entries=8)
    store.store(list(range(10)), kv_cache(10))
    hit = store.fetch([0, 1, 2, 99])
    assert hit is not None and hit.tokens == 3
    # The batch copies the view's first 3 positions; writing past them in a copy
    # must not show in the store.
    merged = KVCache.merge([hit.cache[0]])  # what the batch does with it
    merged.update_and_fetch(mx.zeros((1, 2, 1, 4)), mx.zeros((1, 2, 1, 4)))
    mx.eval(merged.keys)
    again = store.fetch([*range(9), 42])
    assert again is not None and again.tokens == 9
    assert mx.all(again.cache[0].keys[..., :9, :] == 1.0).item()


def test_an_entry_extended_by_a_longer_one_is_dropped() -> None:
    store = PromptCache(max_bytes=10**9, max_entries=8)
    store.store([1, 2, 3], kv_cache(3))
    store.store([1, 2, 3, 4, 5], kv_cache(5))
    assert len(store) == 1
    store.store([1, 2], kv_cache(2))  # already covered: not stored
    assert len(store) == 1 and store.nbytes == sum(c.nbytes for c in kv_cache(5))


def test_byte_cap_evicts_least_recently_used() -> None:
    one = sum(c.nbytes for c in kv_cache(8))
    store = PromptCache(max_bytes=int(2.5 * one), max_entries=8)
    store.store([1] * 8, kv_cache(8))
    store.store([2] * 8, kv_cache(8))
    assert store.fetch([1] * 8 + [0]) is not None  # [1…] becomes the most recent
    store.store([3] * 8, kv_cache(8))
    assert len(store) == 2 and store.nbytes <= 2.5 * one
    assert store.fetch([2] * 8 + [0]) is None  # the least recently used went
    assert store.fetch([1] * 8 + [0]) is not None
    store.store([4] * 100, kv_cache(100))  # bigger than the cap alone: not kept
    assert store.fetch([4] * 100 + [0]) is None


def test_entry_cap_and_off_switch() -> None:
    store = PromptCache(max_bytes=10**9, max_entries=2)
    for i in range(5):
        store.store([i] * 4, kv_cache(4))
    assert len(store) == 2
    off = PromptCache(max_bytes=0, max_entries=8)
    off.store([1, 2, 3], kv_cache(3))
    assert not off.enabled and len(off) == 0


def test_other_caches_are_reused_only_whole_and_copied() -> None:
    store = PromptCache(max_bytes=10**9, max_entries=8)
    store.store([5, 6, 7, 8], rotating_cache(4))
    assert store.fetch([5, 6, 7, 9, 9]) is None  # cannot be cut at 3 tokens
    hit = store.fetch([5, 6, 7, 8, 1, 2])
    assert hit is not None and hit.tokens == 4
    stored = next(iter(store._entries.values())).cache[0]
    assert hit.cache[0] is not stored and hit.cache[0].offset == stored.offset
