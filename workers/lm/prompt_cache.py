r"""Reuse of key/value caches across requests: the longest common token prefix.

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
* anything else (sliding windows, recurrent state, hybrids of these with plain
  attention): an entry serves its own end and the positions of its
  :class:`~.checkpoints.Checkpoint`\ s (the end of the system prompt, of the prompt
  before generation, and every few thousand tokens of a long prefill): the
  layers that cannot be cut are copied from the checkpoint, the plain KV layers
  are views of the entry's. A request that starts from a checkpoint inherits the
  entry's earlier checkpoints, so a conversation's entry keeps serving every
  earlier turn's boundaries.

An entry that another entry extends is dropped on insert when the longer one can
serve it (always for trimmable caches; for the others when the longer one has a
checkpoint at its end, its other checkpoints moving over), so multi-turn chats
keep one entry per conversation. An entry's bytes count its checkpoints.

With a :class:`~.disk_cache.DiskCache` attached (``disk``), entries that fall out of
the LRU (or never fit it) are written to disk, :meth:`PromptCache.spill` writes the
rest when the worker stops, and a lookup that finds a longer prefix on disk than in
memory loads that file into the store. Each adapter set's entries have a disk tier
of their own (``space_disk`` makes it: a folder keyed by the adapters' files).
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from mlx_gateway.workers.common.kv import LayerCaches
from mlx_gateway.workers.lm import checkpoints as cp
from mlx_gateway.workers.lm.checkpoints import Checkpoint
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
    return [cp.kv_view(layer, tokens) for layer in cache]


@dataclass
class _Entry:
    key: bytes
    cache: LayerCaches
    nbytes: int
    trimmable: bool
    space: str = ""
    """The adapter set the cache was computed with ("" for the base model): a
    lookup sees only the entries of its own space."""
    checkpoints: dict[int, Checkpoint] = field(default_factory=dict)
    """Positions before its end that it can serve (non-trimmable caches only)."""

    @property
    def slot(self) -> tuple[str, bytes]:
        return self.space, self.key

    @property
    def tokens(self) -> int:
        return len(self.key) // 4

    def usable(self, shared: int) -> int:
        """The most tokens of a prompt sharing ``shared`` tokens with this entry
        that it can serve (0: none)."""
        if self.trimmable or shared >= self.tokens:
            return min(shared, self.tokens)
        return max((p for p in self.checkpoints if p <= shared), default=0)

    def serves(self, tokens: int) -> bool:
        """Whether it can serve exactly its first ``tokens`` tokens."""
        return self.trimmable or tokens == self.tokens or tokens in self.checkpoints

    def recount(self) -> None:
        self.nbytes = cache_nbytes(self.cache) + sum(c.nbytes for c in self.checkpoints.values())


@dataclass
class Hit:
    """A cache to start a prompt from: it already holds ``tokens`` of the prompt."""

    cache: LayerCaches
    tokens: int
    checkpoints: dict[int, Checkpoint] = field(default_factory=dict)
    """The entry's checkpoints up to ``tokens`` (their end included): valid for the
    request's own cache too, so its entry inherits them."""


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
        """The cache of the entry of ``space`` serving the longest prefix of ``prompt``.

        At least the prompt's last token is left to prefill (its logits start the
        generation), so a hit holds at most ``len(prompt) - 1`` tokens. The entry
        becomes the most recently used."""
        if len(prompt) < 2:
            self.misses += 1
            return None
        key, limit = token_bytes(prompt), len(prompt) - 1
        best, best_tokens = self._best(key, limit, space)
        if (disk := self._disk(space)) is not None:
            found = self._from_disk(disk, space, key, limit, best_tokens)
            if found is not None:
                best, best_tokens = found
        if best is None:
            self.misses += 1
            return None
        if best.slot in self._entries:
            self._entries.move_to_end(best.slot)
        self.hits += 1
        if best.trimmable:
            return Hit(_view(best.cache, best_tokens), best_tokens)
        inherited = {p: c for p, c in best.checkpoints.items() if p <= best_tokens}
        if best_tokens == best.tokens:
            end = cp.of_entry(best.cache, best.tokens)
            inherited[best.tokens] = end
        else:
            end = best.checkpoints[best_tokens]
        return Hit(cp.restore(end, best.cache), best_tokens, inherited)

    def reusable(self, key: bytes, space: str = "") -> int:
        """How many tokens of the prompt ``key`` (see :func:`token_bytes`) an entry in
        memory could serve now (no copy, no change to the LRU order)."""
        limit = len(key) // 4 - 1
        return self._best(key, limit, space)[1] if limit > 0 else 0

    def _best(self, key: bytes, limit: int, space: str) -> tuple[_Entry | None, int]:
        """The entry of ``space`` serving the most tokens of the prompt ``key``, at
        most ``limit``, and that number."""
        best: _Entry | None = None
        best_tokens = 0
        # Newest first, so that a tie (say, just the chat template's opening tokens)
        # goes to a recent entry and does not keep an old one alive.
        for entry in reversed(self._entries.values()):
            if entry.space != space:
                continue
            usable = entry.usable(min(common_prefix(key, entry.key), limit))
            if usable > best_tokens:
                best, best_tokens = entry, usable
        return best, best_tokens

    def store(
        self,
        tokens: list[int],
        cache: LayerCaches,
        space: str = "",
        checkpoints: Iterable[Checkpoint] = (),
    ) -> None:
        """Keep ``cache``, which holds exactly ``tokens``, with the ``checkpoints`` taken
        on the way (ignored for a trimmable cache), evicting the least recently used
        entries beyond the caps. The arrays' evaluation is queued here, so the
        entry does not keep a whole batch's cache alive through a lazy slice for
        longer than the copy takes; queued, not waited for: waiting would stall the
        decoding pipeline (on a GPU the device then idles while Python builds the
        next step) each time a request ends."""
        if not self.enabled or not tokens or not cache:
            return
        key = token_bytes(tokens)
        trimmable = is_trimmable(cache)
        kept = {} if trimmable else {c.position: c for c in checkpoints if c.position < len(tokens)}
        entry = _Entry(key, cache, 0, trimmable, space, kept)
        for other in list(self._entries.values()):
            if other.space != space or other.trimmable != trimmable:
                continue
            if other.key.startswith(key) and other.serves(entry.tokens):
                # Already covered by a longer one: it takes the new checkpoints.
                self._adopt(other, entry)
                self._entries.move_to_end(other.slot)
                return
            if key.startswith(other.key) and entry.serves(other.tokens):
                self._adopt(entry, other)
                self._drop(other.slot)
        mx.async_eval([layer.state for layer in cache])
        entry.recount()
        if entry.nbytes > self.max_bytes:
            entry.checkpoints = {
                p: c for p, c in entry.checkpoints.items() if c.mark != cp.INTERVAL
            }
            entry.recount()
        if entry.nbytes > self.max_bytes:
            self._save(entry)  # too big for memory: the disk tier may still keep it
            return
        self._insert(entry)

    def _adopt(self, into: _Entry, other: _Entry) -> None:
        """Move the checkpoints of ``other`` that ``into`` lacks over to ``into``
        (``other``'s tokens begin ``into``'s, so they hold for it too)."""
        if into.trimmable:
            return
        moved = False
        for position, checkpoint in other.checkpoints.items():
            if position < into.tokens and position not in into.checkpoints:
                into.checkpoints[position] = checkpoint
                moved = True
        if other.tokens < into.tokens and other.tokens not in into.checkpoints:
            into.checkpoints[other.tokens] = cp.of_entry(other.cache, other.tokens)
            moved = True
        if moved and into.slot in self._entries:
            self.nbytes -= into.nbytes
            into.recount()
            self.nbytes += into.nbytes
            self._evict()

    def _insert(self, entry: _Entry) -> None:
        self._drop(entry.slot)
        self._entries[entry.slot] = entry
        self.nbytes += entry.nbytes
        self._evict()

    def _evict(self) -> None:
        while self._entries and (
            len(self._entries) > self.max_entries or self.nbytes > self.max_bytes
        ):
            oldest = self._entries[next(iter(self._entries))]
            self._save(oldest)
            self._drop(oldest.slot)

    def spill(self) -> int:
        """Write every entry to the disk tier (the worker stops); returns how many
        files were written. Most recently used first, so the byte cap keeps those."""
        written = 0
        for entry in reversed(list(self._entries.values())):
            disk = self._disk(entry.space)
            if disk is not None:
                before = disk.saves
                self._save(entry)
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
        """Write an entry to its disk tier, and its system and prompt checkpoints,
        each as a whole cache of its own (a later worker loads a file whole)."""
        if (disk := self._disk(entry.space)) is None:
            return
        for position, checkpoint in sorted(entry.checkpoints.items()):
            if checkpoint.mark in cp.DISK_MARKS:
                disk.save(entry.key[: position * 4], cp.restore(checkpoint, entry.cache))
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
