"""workers/prompt_cache.py on real mlx-lm cache objects (no model needed)."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, KVCache, RotatingKVCache

from mlx_gateway.workers.lm import checkpoints as cp
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


def hybrid_cache(tokens: int, fill: float = 1.0) -> list:
    """A recurrent layer (``ArraysCache``) beside a plain KV layer, at ``tokens``."""
    state = ArraysCache(1)
    state[0] = mx.full((1, 3), fill)
    return [state, *kv_cache(tokens, layers=1, fill=fill)]


def test_a_hybrid_entry_serves_its_checkpoints_and_its_end_only() -> None:
    store = PromptCache(max_bytes=10**9, max_entries=8)
    tokens = list(range(20))
    marks = [
        cp.take(hybrid_cache(8, fill=8.0), 8, cp.SYSTEM),
        cp.take(hybrid_cache(14), 14, cp.PROMPT),
    ]
    store.store(tokens, hybrid_cache(20, fill=20.0), checkpoints=marks)
    assert store.fetch([*range(12), 99]).tokens == 8  # the last checkpoint before 12
    hit = store.fetch([*range(16), 99])
    assert hit is not None and hit.tokens == 14
    assert hit.cache[1].offset == 14  # the KV layer, a view cut at the checkpoint
    assert sorted(hit.checkpoints) == [8, 14]  # inherited by the request's entry
    whole = store.fetch([*range(20), 99])
    assert whole is not None and whole.tokens == 20
    assert float(whole.cache[0][0][0, 0]) == 20.0 and sorted(whole.checkpoints) == [8, 14, 20]
    assert store.fetch([*range(7), 99]) is None  # before the first checkpoint
    # The hit's recurrent state is a copy: changing it leaves the entry intact.
    hit.cache[0][0] = mx.zeros((1, 3))
    again = store.fetch([*range(16), 99])
    assert again is not None and float(again.cache[0][0][0, 0]) == 1.0


def test_a_longer_hybrid_entry_replaces_a_shorter_one_only_when_it_serves_it() -> None:
    store = PromptCache(max_bytes=10**9, max_entries=8)
    store.store(list(range(10)), hybrid_cache(10))
    store.store(list(range(16)), hybrid_cache(16))  # no checkpoint at 10: both kept
    assert len(store) == 2 and store.fetch([*range(10), 7]).tokens == 10
    at_10 = cp.take(hybrid_cache(10), 10, cp.PROMPT)
    store.store(list(range(18)), hybrid_cache(18), checkpoints=[at_10])
    assert len(store) == 2  # the 10-token entry went: the 18-token one serves it
    assert store.fetch([*range(10), 7]).tokens == 10
    assert store.nbytes == sum(e.nbytes for e in store._entries.values())
