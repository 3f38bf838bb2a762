"""Speculative decoding of a solo request: a small draft model guesses a few
tokens, the model checks them all in one forward pass.

Each round the draft model (same vocabulary, far fewer weights) proposes up to
``draft_tokens`` tokens greedily, from its own KV cache. The model then reads its
last token and the proposals in one pass, which gives its next-token distribution
after each of them; the request's sampler draws a token from each. Proposals are
taken while they equal the model's own draws, and the draw after the last taken
proposal comes with them: one to ``draft_tokens + 1`` tokens per pass of the
model. Both caches are cut back to what was taken.

Every token is drawn from the model's distribution given exactly the tokens
before it, so the output is what the model alone would produce: the same ids for
greedy requests (up to the last bits of floating point: the model reads several
tokens per pass instead of one), the same distribution for sampled ones (a seed
draws other numbers, so seeded text differs from the plain loop's).

A request with logits processors (penalties, a grammar, a thinking budget: they
keep per-token state) decodes with the plain :class:`~.solo.SoloDecode` loop, as
does every request that runs in the batch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import mlx.core as mx
from mlx_lm import load as load_model_and_tokenizer
from mlx_lm.models.cache import KVCache, make_prompt_cache, trim_prompt_cache

from mlx_gateway.workers.common.kv import dequantized
from mlx_gateway.workers.common.sampling import Sampler
from mlx_gateway.workers.lm.prompt_cache import LayerCaches, is_trimmable
from mlx_gateway.workers.lm.solo import CLEAR_EVERY, Handover, SoloDecode
from mlx_gateway.workers.runtime.contract import LoadError
from mlx_gateway.workers.runtime.hub import resolve_model_path

DRAFT_TOKENS = 3
"""Proposals per round when the spec's options leave ``num_draft_tokens`` out."""


class Draft:
    """A loaded draft model and how many tokens it proposes a round."""

    def __init__(self, model: Any, tokens: int, path: str) -> None:
        self.model = model
        self.tokens = tokens
        self.path = path


def load_draft(
    name: str,
    tokens: int,
    vocabulary: dict[str, int],
    trust_remote_code: bool,
    on_download: Callable[[str], None],
) -> Draft:
    """Load the draft model ``name`` (a folder or a hub id); refuse one whose
    tokenizer's vocabulary is not ``vocabulary`` (the model's) or whose KV cache
    cannot be cut back."""
    if tokens < 1:
        raise LoadError(f"num_draft_tokens must be at least 1, got {tokens}")
    path = resolve_model_path(name, on_download=on_download)
    model, tokenizer = load_model_and_tokenizer(
        str(path), tokenizer_config={"trust_remote_code": trust_remote_code}
    )[:2]
    theirs = tokenizer.get_vocab()
    if theirs != vocabulary:
        only_model = len(set(vocabulary.items()) - set(theirs.items()))
        only_draft = len(set(theirs.items()) - set(vocabulary.items()))
        raise LoadError(
            f"draft model {name} has another vocabulary than the model ({len(theirs)} "
            f"tokens against {len(vocabulary)}; {only_model} of the model's token ids and "
            f"{only_draft} of the draft's differ): a draft must share the model's "
            "tokenizer; pick one of the same family (e.g. a smaller size of the same model)"
        )
    if not is_trimmable(make_prompt_cache(model)):
        raise LoadError(
            f"draft model {name} keeps a KV cache that cannot be cut back (sliding "
            "windows or recurrent layers); pick a draft with plain attention layers"
        )
    return Draft(model, tokens, name)


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
