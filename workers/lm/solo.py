"""One request decoded on its own, without the batch machinery.

``BatchGenerator`` pays for serving many sequences at once even when it serves
one: a batch cache with per-row offsets and masks, per-row bookkeeping, more
MLX operations per step. A home-lab model is often used by one client at a time,
so the lm backend decodes a request that runs alone with :class:`SoloDecode`: a
plain per-layer ``KVCache`` and the same pipelined loop as mlx-lm's
``generate_step`` (the next step is queued before the current token is read, so
the device never waits on Python). On a 2-core CPU with the tests' tiny llama
this is about 14 % more tokens/s than a batch of one.

When a second request arrives the solo request moves into the batch with its
cache (:meth:`SoloDecode.handover`), exactly like a prompt-cache hit: the
tokens already in the cache are not computed again, and the request's sampler,
logits processors and remaining budget carry over.

Only models whose cache is a plain ``KVCache`` per layer (llama, qwen, mistral,
…) decode solo; others always use the batch. With a draft model (:mod:`.speculative`)
a solo request without logits processors decodes speculatively
(:class:`SpeculativeDecode`, :func:`decode_alone` picks).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import mlx.core as mx
from mlx_lm.models.cache import KVCache, TokenBuffer, make_prompt_cache, trim_prompt_cache

from mlx_gateway.workers.common.kv import cache_bytes, dequantized
from mlx_gateway.workers.common.sampling import LogitsProcessor, Sampler
from mlx_gateway.workers.lm.prompt_cache import LayerCaches, is_trimmable
from mlx_gateway.workers.lm.speculative import Draft

CLEAR_EVERY = 256
"""Tokens between two releases of MLX's buffer cache (as ``generate_step`` does)."""


def supports_solo(model: Any) -> bool:
    """Whether ``model``'s cache is a plain ``KVCache`` in every layer."""
    return is_trimmable(make_prompt_cache(model))


def private_copy(cache: LayerCaches, tokens: int) -> LayerCaches:
    """The first ``tokens`` tokens of a trimmable cache, as arrays of its own: the
    solo loop writes into its cache, and a prompt-cache entry must stay intact
    (an MLX slice assignment changes the array object every holder sees)."""
    copies = []
    for layer in cache:
        copy = KVCache()
        copy.keys = layer.keys[..., :tokens, :]
        copy.values = layer.values[..., :tokens, :]
        copy.offset = tokens
        copies.append(copy)
    return copies


@dataclass
class Handover:
    """What the batch needs to go on with a solo request: ``prompt`` to prefill
    (at least one token) on top of ``cache``, which holds ``cached``."""

    prompt: list[int]
    cache: LayerCaches
    cached: list[int]


class SoloDecode:
    """The decoding state of one request.

    ``cache`` holds ``cached`` tokens; ``prompt`` is what is left to prefill (at
    least its last token). Each :meth:`step` prefills one slice of at most
    ``prefill_step_size`` tokens, or returns one generated token with its
    log-probabilities (``step_size`` may change between steps).
    """

    def __init__(
        self,
        model: Any,
        stream: mx.Stream,
        cache: LayerCaches,
        cached: Sequence[int],
        prompt: Sequence[int],
        sampler: Sampler,
        processors: Sequence[LogitsProcessor],
        prefill_step_size: int,
        quantize: Callable[[LayerCaches], None] | None = None,
    ) -> None:
        if not prompt:
            raise ValueError("a solo request needs at least one prompt token to prefill")
        self.model = model
        self.stream = stream
        self.cache = cache
        self.fed: list[int] = list(cached)
        """The tokens in ``cache``, in order."""
        self._rest = list(prompt)
        self._sampler = sampler
        self._processors = list(processors)
        self._context = TokenBuffer(list(cached)) if self._processors else None
        self.step_size = max(prefill_step_size, 1)
        """Most prompt tokens one :meth:`step` prefills (the backend may change it)."""
        self._next: tuple[mx.array, mx.array] | None = None
        """The sampled token that comes next (not yet returned, not yet in the cache)
        and its log-probabilities."""
        self._returned = 0
        self._quantize = quantize
        """Quantizes the cache once it holds enough tokens (``kv_bits``, see :mod:`.kv`)."""

    @property
    def prefilling(self) -> bool:
        return self._next is None

    @property
    def unread(self) -> int:
        """Prompt tokens not yet in the cache (the last one is read with the first
        generated token)."""
        return len(self._rest)

    def step(self) -> tuple[int, mx.array] | None:
        """Prefill one slice (``None``) or return the next token and its log-probs."""
        if self._next is None and len(self._rest) > 1:
            self._prefill_slice()
            return None
        with mx.stream(self.stream):
            if self._next is None:
                last, self._rest = self._rest, []
                self._next = self._forward(mx.array(last))
                self.fed.extend(last)
                mx.async_eval(*self._next)
            token, logprobs = self._next
            # Queue the following step before reading this token, as generate_step does.
            self._next = self._forward(token)
            mx.async_eval(*self._next)
            value = int(cast(int, token.item()))
            self.fed.append(value)
        self._returned += 1
        if self._returned % CLEAR_EVERY == 0:
            mx.clear_cache()
        return value, logprobs

    def _prefill_slice(self) -> list[int]:
        """Put the next slice of the prompt (never its last token) into the cache;
        returns the slice."""
        part = self._rest[: min(max(self.step_size, 1), len(self._rest) - 1)]
        with mx.stream(self.stream):
            self.model(mx.array(part)[None], cache=self.cache)
            if self._quantize is not None:
                self._quantize(self.cache)
            mx.eval([layer.state for layer in self.cache])
        self.fed.extend(part)
        if self._context is not None:
            self._context.update_and_fetch(mx.array(part))
        self._rest = self._rest[len(part) :]
        return part

    def handover(self) -> tuple[Handover, tuple[int, mx.array] | None]:
        """Stop decoding solo. Returns what the batch prefills next, and the token
        that was already sampled (the caller takes it like any generated token; if
        that token ends the request, the handover is not used)."""
        if self._next is None:
            return Handover(self._rest, dequantized(self.cache), list(self.fed)), None
        token, logprobs = self._next
        self._next = None
        value = int(cast(int, token.item()))
        return Handover([value], dequantized(self.cache), list(self.fed)), (value, logprobs)

    def finished_cache(self) -> tuple[list[int], LayerCaches]:
        """The tokens in the cache and the cache cut to them (for the prompt cache)."""
        tokens = len(self.fed)
        kept = []
        for layer in dequantized(self.cache):
            copy = KVCache()
            # Contiguous copies: a slice would keep the whole (step-rounded) buffer alive.
            copy.keys = mx.contiguous(layer.keys[..., :tokens, :])
            copy.values = mx.contiguous(layer.values[..., :tokens, :])
            copy.offset = tokens
            kept.append(copy)
        return list(self.fed), kept

    def _forward(self, tokens: mx.array) -> tuple[mx.array, mx.array]:
        if self._quantize is not None:
            self._quantize(self.cache)
        logits = self.model(tokens[None], cache=self.cache)[:, -1, :]
        if self._context is not None:
            context = self._context.update_and_fetch(tokens)
            for processor in self._processors:
                logits = processor(context, logits)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        return self._sampler(logprobs), logprobs[0]

    def nbytes(self) -> int:
        """Bytes of its KV cache (array sizes only, no evaluation)."""
        return cache_bytes(self.cache)


def decode_alone(
    model: Any,
    stream: mx.Stream,
    cache: LayerCaches,
    cached: Sequence[int],
    prompt: Sequence[int],
    sampler: Sampler,
    processors: Sequence[LogitsProcessor],
    prefill_step_size: int,
    *,
    draft: Draft | None,
    budget: int,
    quantize: Callable[[LayerCaches], None] | None,
) -> SoloDecode:
    """A request's solo decoding: speculative with ``draft`` unless it has logits
    processors (they keep per-token state), else the plain loop."""
    if draft is not None and not processors:
        return SpeculativeDecode(
            model,
            stream,
            cache,
            cached=cached,
            prompt=prompt,
            sampler=sampler,
            prefill_step_size=prefill_step_size,
            draft=draft,
            budget=budget,
        )
    return SoloDecode(
        model,
        stream,
        cache,
        cached=cached,
        prompt=prompt,
        sampler=sampler,
        processors=processors,
        prefill_step_size=prefill_step_size,
        quantize=quantize,
    )


class SpeculativeDecode(SoloDecode):
    """A solo request decoded with a draft model (see the module docstring).

    ``budget`` is the most tokens the request may still generate: no round drafts
    past it. :meth:`step` returns one token a call, from the tokens the last round
    took; ``proposed`` and ``accepted`` count the draft's proposals and those taken.
    """

    def __init__(
        self,
        model: Any,
        stream: mx.Stream,
        cache: LayerCaches,
        cached: Sequence[int],
        prompt: Sequence[int],
        sampler: Sampler,
        prefill_step_size: int,
        *,
        draft: Draft,
        budget: int,
    ) -> None:
        super().__init__(model, stream, cache, cached, prompt, sampler, (), prefill_step_size)
        self._draft = draft
        self.draft_cache: LayerCaches = make_prompt_cache(draft.model)
        self._drafted = 0
        """Tokens of ``_seq`` in the draft's cache."""
        self._seq = list(cached) + list(prompt)
        """The prompt and every token taken so far (returned or waiting in ``_ready``).
        While decoding, the model's cache holds all of it but the last token."""
        self._given = len(self._seq)
        """Tokens of ``_seq`` handed out (the prompt counts as handed out)."""
        self._ready: deque[tuple[int, mx.array]] = deque()
        self._budget = budget
        self._decoding = False
        self.proposed = 0
        self.accepted = 0

    @property
    def prefilling(self) -> bool:
        return not self._decoding

    def step(self) -> tuple[int, mx.array] | None:
        """Prefill one slice (``None``) or return the next token and its log-probs."""
        if self._ready:
            return self._give()
        if len(self._rest) > 1:
            self._prefill_slice()
            self._feed_draft(len(self.fed))
            return None
        if len(self._seq) - 1 - self._drafted > self.step_size:
            self._feed_draft(len(self._seq) - 1)  # a prompt-cache hit: the draft catches up
            return None
        self._rest, self._decoding = [], True
        self._round()
        return self._give()

    def handover(self) -> tuple[Handover, tuple[int, mx.array] | None]:
        if not self._decoding:
            return Handover(self._rest, dequantized(self.cache), list(self.fed)), None
        given = self._seq[: self._given]
        if not self._ready:  # the last token handed out is not in the cache yet
            return Handover([self._seq[-1]], dequantized(self.cache), self._seq[:-1]), None
        token, logprobs = self._ready.popleft()
        self._ready.clear()
        trim_prompt_cache(self.cache, self._held() - len(given))
        self._given += 1
        return Handover([token], dequantized(self.cache), given), (token, logprobs)

    def nbytes(self) -> int:
        """Bytes of its KV cache and of the draft's."""
        return cache_bytes(self.cache) + cache_bytes(self.draft_cache)

    def finished_cache(self) -> tuple[list[int], LayerCaches]:
        """The handed-out tokens the cache holds, and the cache cut to them."""
        tokens = self._seq[: min(self._given, self._held())] if self._decoding else self.fed
        kept = []
        for layer in self.cache:
            copy = KVCache()
            copy.keys = mx.contiguous(layer.keys[..., : len(tokens), :])
            copy.values = mx.contiguous(layer.values[..., : len(tokens), :])
            copy.offset = len(tokens)
            kept.append(copy)
        return list(tokens), kept

    # ---------------------------------------------------------------- rounds

    def _give(self) -> tuple[int, mx.array]:
        token, logprobs = self._ready.popleft()
        self._given += 1
        if self._given % CLEAR_EVERY == 0:
            mx.clear_cache()
        return token, logprobs

    def _held(self) -> int:
        """Tokens in the model's cache."""
        return int(self.cache[0].offset)

    def _feed_draft(self, upto: int) -> None:
        """Put ``_seq[_drafted:upto]`` into the draft's cache, at most one slice."""
        part = self._seq[self._drafted : min(upto, self._drafted + self.step_size)]
        if not part:
            return
        with mx.stream(self.stream):
            self._draft.model(mx.array(part)[None], cache=self.draft_cache)
            mx.eval([layer.state for layer in self.draft_cache])
        self._drafted += len(part)

    def _propose(self, count: int) -> list[int]:
        """``count`` greedy tokens of the draft after ``_seq``. The draft's cache then
        holds ``_seq`` and all proposals but the last."""
        model, cache = self._draft.model, self.draft_cache
        while len(self._seq) - self._drafted > self.step_size:
            self._feed_draft(len(self._seq) - 1)
        tokens = mx.array(self._seq[self._drafted :])
        proposals = []
        with mx.stream(self.stream):
            for _ in range(count):
                logits = model(tokens[None], cache=cache)[:, -1, :]
                tokens = mx.argmax(logits, axis=-1)
                mx.async_eval(tokens)
                proposals.append(tokens)
            out: list[int] = mx.concatenate(proposals).tolist()  # type: ignore[assignment]
        self._drafted = len(self._seq) + count - 1
        return out

    def _round(self) -> None:
        """Draft, verify in one pass of the model, take what agrees."""
        count = min(self._draft.tokens, self._budget - 1)
        proposals = self._propose(count) if count > 0 else []
        with mx.stream(self.stream):
            ids = mx.array([self._seq[-1], *proposals])
            logits = self.model(ids[None], cache=self.cache)[0]
            logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
            drawn = self._sampler(logprobs)
            mx.eval(drawn, logprobs)
        taken: list[int] = drawn.tolist()  # type: ignore[assignment]
        agreed = 0
        while agreed < len(proposals) and taken[agreed] == proposals[agreed]:
            agreed += 1
        taken = taken[: agreed + 1]
        # The model's cache holds _seq and every proposal: keep the agreed ones.
        trim_prompt_cache(self.cache, len(proposals) - agreed)
        if proposals:
            # The draft's holds _seq and the proposals but the last.
            kept = min(agreed, len(proposals) - 1)
            trim_prompt_cache(self.draft_cache, len(proposals) - 1 - kept)
            self._drafted = len(self._seq) + kept
        self._seq.extend(taken)
        self._budget -= len(taken)
        self.proposed += len(proposals)
        self.accepted += agreed
        for i, token in enumerate(taken):
            self._ready.append((token, logprobs[i]))
