"""Reuse of key/value caches across requests: the longest common token prefix.

A request that finished leaves its KV cache (prompt and generated tokens) here.
A new request whose prompt starts with the same tokens, typically the next turn
of the same chat, starts from that cache and prefills only the rest.

The store is LRU, bounded by bytes and by entries. Lookup compares the new prompt
with every entry (entries are few; the comparison is a binary search on the token
ids as bytes, so it runs in C).

Two kinds of model caches:

* *trimmable* (every layer a plain ``KVCache``, as in llama, qwen2/3, mistral):
  any common prefix can be reused. The cache handed out is a view of the stored
  arrays cut at the prefix; ``BatchGenerator`` copies it into its batch cache and
  never writes to it, so the stored entry stays intact.
* anything else (sliding windows, recurrent state): an entry is reused only when
  all of its tokens begin the prompt, from a deep copy.

Entries that another entry extends are dropped on insert (for trimmable caches the
longer one serves both), so multi-turn chats keep one entry per conversation.

With a :class:`~.disk_cache.DiskCache` attached (``disk``), entries that fall out of
the LRU (or never fit it) are written to disk, :meth:`PromptCache.spill` writes the
rest when the worker stops, and a lookup that finds a longer prefix on disk than in
memory loads that file into the store. Each adapter set's entries have a disk tier
of their own (``space_disk`` makes it: a folder keyed by the adapters' files).
"""

from __future__ import annotations

import copy
from array import array
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from mlx_gateway.workers.common.kv import LayerCaches
from mlx_gateway.workers.lm.disk_cache import DiskCache

DISK_MIN_GAIN = 16
"""A file on disk is loaded only when it holds this many more prompt tokens than the
best entry in memory (a shared chat-template opening is not worth a load)."""


def token_bytes(tokens: list[int]) -> bytes:
    """Token ids as fixed-width bytes, so prefixes compare with C's ``memcmp``."""
    return array("I", tokens).tobytes()


def common_prefix(a: bytes, b: bytes) -> int:
    """The number of leading tokens ``a`` and ``b`` (see :func:`token_bytes`) share."""
    low, high = 0, min(len(a), len(b)) // 4
    if a[: high * 4] == b[: high * 4]:
        return high
    # Invariant: the first `low` tokens match and the first `high` do not.
    while high - low > 1:
        mid = (low + high) // 2
        if a[: mid * 4] == b[: mid * 4]:
            low = mid
        else:
            high = mid
    return low


def is_trimmable(cache: LayerCaches) -> bool:
    """Whether any prefix of this cache can be cut out of it (plain ``KVCache``)."""
    return bool(cache) and all(type(layer) is KVCache for layer in cache)


def cache_nbytes(cache: LayerCaches) -> int:
    return sum(int(layer.nbytes) for layer in cache)


def _view(cache: LayerCaches, tokens: int) -> LayerCaches:
    """A cache holding the first ``tokens`` tokens of ``cache`` without copying."""
    views = []
    for layer in cache:
        view = KVCache()
        view.keys, view.values, view.offset = layer.keys, layer.values, tokens
        views.append(view)
    return views


@dataclass
class _Entry:
    key: bytes
    cache: LayerCaches
    nbytes: int
    trimmable: bool
    space: str = ""
    """The adapter set the cache was computed with ("" for the base model): a
    lookup sees only the entries of its own space."""

    @property
    def slot(self) -> tuple[str, bytes]:
        return self.space, self.key

    @property
    def tokens(self) -> int:
        return len(self.key) // 4


@dataclass
class Hit:
    """A cache to start a prompt from: it already holds ``tokens`` of the prompt."""

    cache: LayerCaches
    tokens: int


class PromptCache:
    """LRU store of KV caches keyed by the tokens they hold.

    ``max_bytes`` and ``max_entries`` bound what is stored (0 turns the cache off);
    the caches of running requests are not counted. Used on the MLX thread only.
    """

    def __init__(self, max_bytes: int, max_entries: int) -> None:
        self.max_bytes = max(max_bytes, 0)
        self.max_entries = max(max_entries, 0)
        self._entries: OrderedDict[tuple[str, bytes], _Entry] = OrderedDict()
        self.nbytes = 0
        self.hits = 0
        self.misses = 0
        self.disk: DiskCache | None = None
        """The disk tier of the base model's entries (space "")."""
        self.space_disk: Callable[[str], DiskCache | None] | None = None
        """Makes the disk tier of an adapter set's entries (its own folder)."""
        self._space_disks: dict[str, DiskCache | None] = {}

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0 and self.max_entries > 0

    def __len__(self) -> int:
        return len(self._entries)

    def fetch(self, prompt: list[int], space: str = "") -> Hit | None:
        """The cache of the entry of ``space`` sharing the longest prefix with ``prompt``.

        At least the prompt's last token is left to prefill (its logits start the
        generation), so a hit holds at most ``len(prompt) - 1`` tokens. The entry
        becomes the most recently used."""
        disk = self._disk(space)
        if len(prompt) < 2 or not (self._entries or disk):
            self.misses += 1
            return None
        key = token_bytes(prompt)
        limit = len(prompt) - 1
        best: _Entry | None = None
        best_tokens = 0
        # Newest first, so that a tie (say, just the chat template's opening tokens)
        # goes to a recent entry and does not keep an old one alive.
        for entry in reversed(self._entries.values()):
            if entry.space != space:
                continue
            shared = min(common_prefix(key, entry.key), limit)
            if not entry.trimmable and shared < entry.tokens:
                continue  # only whole entries of a non-trimmable cache can be used
            if shared > best_tokens:
                best, best_tokens = entry, shared
        if disk and (found := self._from_disk(disk, space, key, limit, best_tokens)) is not None:
            best, best_tokens = found
        if best is None:
            self.misses += 1
            return None
        if best.slot in self._entries:
            self._entries.move_to_end(best.slot)
        self.hits += 1
        if best.trimmable:
            return Hit(_view(best.cache, best_tokens), best_tokens)
        return Hit(copy.deepcopy(best.cache), best_tokens)

    def store(self, tokens: list[int], cache: LayerCaches, space: str = "") -> None:
        """Keep ``cache``, which holds exactly ``tokens``, evicting the least recently
        used entries beyond the caps. The arrays' evaluation is queued here, so the
        entry does not keep a whole batch's cache alive through a lazy slice for
        longer than the copy takes; queued, not waited for: waiting would stall the
        decoding pipeline (on a GPU the device then idles while Python builds the
        next step) each time a request ends."""
        if not self.enabled or not tokens or not cache:
            return
        key = token_bytes(tokens)
        trimmable = is_trimmable(cache)
        for other in list(self._entries.values()):
            if other.space != space:
                continue
            if trimmable and other.trimmable and other.key.startswith(key):
                self._entries.move_to_end(other.slot)  # already covered by a longer one
                return
            if other.key != key and key.startswith(other.key) and trimmable == other.trimmable:
                self._drop(other.slot)
        mx.async_eval([layer.state for layer in cache])
        entry = _Entry(key, cache, cache_nbytes(cache), trimmable, space)
        if entry.nbytes > self.max_bytes:
            self._save(entry)  # too big for memory: the disk tier may still keep it
            return
        self._insert(entry)

    def _insert(self, entry: _Entry) -> None:
        self._drop(entry.slot)
        self._entries[entry.slot] = entry
        self.nbytes += entry.nbytes
        while self._entries and (
            len(self._entries) > self.max_entries or self.nbytes > self.max_bytes
        ):
            oldest = self._entries[next(iter(self._entries))]
            self._save(oldest)
            self._drop(oldest.slot)

    def spill(self) -> int:
        """Write every entry to the disk tier (the worker stops); returns how many
        were written. Most recently used first, so the byte cap keeps those."""
        written = 0
        for entry in reversed(list(self._entries.values())):
            disk = self._disk(entry.space)
            if disk is not None:
                before = disk.saves
                disk.save(entry.key, entry.cache)
                written += disk.saves - before
        return written

    def _disk(self, space: str) -> DiskCache | None:
        """The disk tier of ``space`` (``None``: off)."""
        if not space:
            disk = self.disk
        elif space in self._space_disks:
            disk = self._space_disks[space]
        else:
            disk = self.space_disk(space) if self.space_disk is not None else None
            self._space_disks[space] = disk
        return disk if disk is not None and disk.enabled else None

    def _save(self, entry: _Entry) -> None:
        if (disk := self._disk(entry.space)) is not None:
            disk.save(entry.key, entry.cache)

    def _from_disk(
        self, disk: DiskCache, space: str, key: bytes, limit: int, best_tokens: int
    ) -> tuple[_Entry, int] | None:
        """Load the saved cache sharing the longest prefix with ``key`` when it beats
        the memory's best by :data:`DISK_MIN_GAIN` tokens; it joins the store."""
        ranked = sorted(
            (
                (min(common_prefix(key, tokens), limit), len(tokens) // 4, stem)
                for stem, tokens in disk.candidates().items()
            ),
            reverse=True,
        )
        for shared, length, stem in ranked:
            if shared < best_tokens + DISK_MIN_GAIN:
                return None
            found = disk.load(stem)
            if found is None:
                continue  # corrupt or stale: removed and logged; try the next one
            trimmable = is_trimmable(found.cache)
            entry = _Entry(token_bytes(found.tokens), found.cache, 0, trimmable, space)
            if not entry.trimmable and shared < length:
                continue
            mx.eval([layer.state for layer in entry.cache])
            entry.nbytes = cache_nbytes(entry.cache)
            if entry.nbytes <= self.max_bytes:
                self._insert(entry)
            return entry, shared
        return None

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0

    def spaces(self) -> set[str]:
        """The spaces that hold entries in memory or have a disk tier open."""
        return {space for space, _ in self._entries} | set(self._space_disks)

    def forget(self, space: str) -> None:
        """Drop every entry of ``space`` from memory and its disk tier from this store
        (its adapter was unmounted or replaced; the files stay, under a key that a
        changed adapter no longer matches)."""
        self._space_disks.pop(space, None)
        for slot in [slot for slot in self._entries if slot[0] == space]:
            self._drop(slot)

    def _drop(self, slot: tuple[str, bytes]) -> None:
        entry = self._entries.pop(slot, None)
        if entry is not None:
            self.nbytes -= entry.nbytes
