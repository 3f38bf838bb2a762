"""Checkpoints: a model's cache as it stood at one position of a stored prompt.

A plain ``KVCache`` layer can be cut at any prefix (a view of its first N keys and
values), so a stored entry of a plain-attention model serves every prefix of its
tokens. The other layer kinds cannot be cut: a recurrent or convolution state
(``ArraysCache``: Gated DeltaNet, Mamba2, LFM2's short convolutions) holds the
whole history folded into one fixed-size array, and a sliding-window layer
(``RotatingKVCache``) has overwritten what fell out of its window. To resume such a
model at position N, the state of those layers at N must have been kept.

A :class:`Checkpoint` keeps exactly that: the layers that cannot be cut, copied at
its position; the plain KV layers are ``None`` in it and come from the entry that
holds the checkpoint (a view cut at the position, see :func:`restore`). So ten
checkpoints of a hybrid model cost ten small states, not ten caches.

Where checkpoints are taken (see :func:`plan`): the end of the leading system/tools
part of a chat prompt (``system``), every ``interval`` tokens of a long prefill
(``interval``), the end of the prompt before generation (``prompt``); the end of
the reply is the entry itself.
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import (
    ArraysCache,
    CacheList,
    KVCache,
    RotatingKVCache,
    make_prompt_cache,
)

log = logging.getLogger(__name__)

LayerCaches = list[Any]

MIN_INTERVAL = 256
"""The shortest distance between two interval checkpoints (and their rounding)."""
MAX_INTERVAL = 8192
"""The longest: a history rewrite loses at most this many tokens of a long prefix."""
CHECKPOINT_SHARE = 0.25
"""The part of ``prompt_cache_bytes`` that the interval checkpoints of one prefill
of the whole context may take (see :func:`interval`)."""

DEFAULT_CONTEXT = 32768
"""The context assumed for a model that states none."""

MIN_SYSTEM = 64
"""A system prompt shorter than this gets no checkpoint of its own (the chat
template's opening alone is not worth a stop of the batch and a stored entry)."""

SYSTEM, INTERVAL, PROMPT, END = "system", "interval", "prompt", "end"
DISK_MARKS = (SYSTEM, PROMPT)
"""Checkpoints written to the disk tier with their entry (each as a whole cache)."""


def cuttable(layer: Any) -> bool:
    """Whether a prefix of this layer's cache can be cut out of it (a plain KV cache)."""
    return type(layer) is KVCache


def fixed_size(layer: Any) -> bool:
    """Whether this layer's state stays the same size however long the prompt."""
    if isinstance(layer, CacheList):
        return all(cuttable(part) or fixed_size(part) for part in layer.caches)
    return isinstance(layer, ArraysCache | RotatingKVCache)


class Parts:
    """The kept part of a ``CacheList`` layer (Falcon-H1's Mamba2 state beside its
    attention): its plain KV parts are ``None``, taken from the entry."""

    def __init__(self, parts: list[Any]) -> None:
        self.parts = parts

    @property
    def state(self) -> list[Any]:
        return [part.state for part in self.parts if part is not None]

    @property
    def nbytes(self) -> int:
        return layers_nbytes(self.parts)


def _kept(layer: Any) -> Any:
    """What a checkpoint keeps of one layer (``None``: nothing, it can be cut)."""
    if cuttable(layer):
        return None
    if isinstance(layer, CacheList):
        return Parts([_kept(part) for part in layer.caches])
    return layer


def _restored(kept: Any, layer: Any, position: int) -> Any:
    if kept is None:
        return kv_view(layer, position)
    if isinstance(kept, Parts):
        return CacheList(
            *(
                _restored(k, part, position)
                for k, part in zip(kept.parts, layer.caches, strict=True)
            )
        )
    return copy.deepcopy(kept)


def layers_nbytes(layers: list[Any]) -> int:
    return sum(int(layer.nbytes) for layer in layers if layer is not None)


@dataclass
class Checkpoint:
    """The layers of a cache that cannot be cut, as they stood at ``position``
    (``None`` where the layer is a plain KV cache, taken from the entry)."""

    position: int
    layers: list[Any] = field(repr=False)
    mark: str = INTERVAL
    nbytes: int = 0

    def __post_init__(self) -> None:
        if not self.nbytes:
            self.nbytes = layers_nbytes(self.layers)


def take(cache: LayerCaches, position: int, mark: str) -> Checkpoint:
    """A checkpoint of ``cache`` (which holds ``position`` tokens and belongs to the
    caller: a row extracted from the batch). Its plain KV layers are dropped
    unevaluated, so they cost nothing; the kept states are queued for evaluation,
    so they stop referring to the batch's arrays soon."""
    kept = [_kept(layer) for layer in cache]
    mx.async_eval([layer.state for layer in kept if layer is not None])
    return Checkpoint(position, kept, mark)


def of_entry(cache: LayerCaches, position: int) -> Checkpoint:
    """The checkpoint at an entry's own end: its non-cuttable layers, shared (no copy)."""
    return Checkpoint(position, [_kept(layer) for layer in cache], END)


def kv_view(layer: KVCache, tokens: int) -> KVCache:
    """The first ``tokens`` positions of a plain KV layer, without copying."""
    view = KVCache()
    view.keys, view.values, view.offset = layer.keys, layer.values, tokens
    return view


def restore(checkpoint: Checkpoint, entry: LayerCaches) -> LayerCaches:
    """A cache holding the first ``checkpoint.position`` tokens of ``entry``: plain
    KV layers as views of the entry's, the others copied from the checkpoint (the
    batch writes into those; the stored checkpoint must stay intact)."""
    return [
        _restored(kept, layer, checkpoint.position)
        for kept, layer in zip(checkpoint.layers, entry, strict=True)
    ]


def state_bytes(cache: LayerCaches) -> tuple[int, bool]:
    """The bytes one checkpoint of this model takes once its windows are full, and
    whether every non-cuttable layer is of a fixed size (so interval checkpoints
    have a bounded cost). ``cache`` has read at least one token."""
    total, bounded = 0, True
    for layer in cache:
        if cuttable(layer):
            continue
        if isinstance(layer, CacheList):
            part_total, part_bounded = state_bytes(list(layer.caches))
            total += part_total
            bounded = bounded and part_bounded
        elif isinstance(layer, RotatingKVCache) and layer.keys is not None:
            held = max(int(layer.keys.shape[2]), 1)
            total += int(layer.nbytes) * max(layer.max_size, held) // held
        else:
            total += int(layer.nbytes)
            bounded = bounded and fixed_size(layer)
    return total, bounded


def interval(state: int, context: int, budget: int) -> int:
    """Tokens between two interval checkpoints of a long prefill.

    Chosen so that the checkpoints of one prefill of the whole ``context`` take at
    most :data:`CHECKPOINT_SHARE` of the prompt cache's ``budget``:
    ``context / interval * state <= share * budget``, rounded up to a multiple of
    :data:`MIN_INTERVAL` and kept within [MIN_INTERVAL, MAX_INTERVAL]. A 0 ``state``
    (a plain-attention model) needs none: the interval is 0."""
    if state <= 0 or budget <= 0:
        return 0
    raw = context * state / (CHECKPOINT_SHARE * budget)
    steps = max(math.ceil(raw / MIN_INTERVAL), 1)
    return min(steps * MIN_INTERVAL, MAX_INTERVAL)


def checkpoint_settings(
    model: Any, stream: mx.Stream, context: int | None, budget: int, *, measure: bool = True
) -> tuple[bool, int]:
    """Whether ``model``'s cache can be cut anywhere, and its checkpoint interval.

    The state's size is read off a cache that has read one token (``measure``
    false, as on a rank of a sharded model, where a lone forward pass would wait
    for the others: no interval checkpoints)."""
    cache = make_prompt_cache(model)
    if all(cuttable(layer) for layer in cache):
        return True, 0
    if not measure or budget <= 0:
        return False, 0
    with mx.stream(stream):
        model(mx.array([[0]]), cache=cache)
        mx.eval([layer.state for layer in cache])
    state, bounded = state_bytes(cache)
    every = interval(state, context or DEFAULT_CONTEXT, budget) if bounded else 0
    log.info(
        "checkpoints: %s of state each, every %s tokens of a long prefill",
        f"{state / 2**20:.1f} MiB",
        every or "no",
    )
    return False, every


def plan(start: int, prompt_tokens: int, system_end: int, every: int, cut: bool) -> dict[int, str]:
    """The positions of a prompt where a checkpoint is taken, and their marks.

    ``start``: tokens already in the cache; ``system_end``: where the first user turn
    starts (0: unknown); ``every``: the interval (0: none); ``cut``: the model's
    cache can be cut anywhere (then only the system end is kept, as a shared
    entry). The last prompt token is read with the first generated one, so the
    prompt's own checkpoint is at ``prompt_tokens - 1``."""
    last = prompt_tokens - 1
    marks: dict[int, str] = {}
    if every and not cut:
        for position in range(every, last, every):
            if position > start:
                marks[position] = INTERVAL
    if not cut and last > start:
        marks[last] = PROMPT
    if system_end >= MIN_SYSTEM and start < system_end < last:
        marks[system_end] = SYSTEM
    return marks


def segments(prompt: list[int], start: int, positions: list[int]) -> list[list[int]]:
    """``prompt[start:]`` split at the absolute ``positions`` (for mlx-lm's
    ``BatchGenerator.insert_segments``: it stops at each segment's end)."""
    parts, begin = [], start
    for position in sorted(positions):
        if begin < position < len(prompt):
            parts.append(prompt[begin:position])
            begin = position
    parts.append(prompt[begin:])
    return parts
