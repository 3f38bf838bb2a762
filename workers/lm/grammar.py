"""Grammar-constrained decoding with llguidance, as an mlx-lm logits processor.

A request's :class:`~mlx_gateway.protocol.messages.Constraint` is a Lark grammar
in llguidance's dialect (a JSON schema travels inside it as ``%json {…}``). Before
each sampled token, the request's matcher computes which tokens may come next and
every other logit becomes ``-inf``: whatever the weights, the text can only grow
along the grammar, and once the grammar is complete only an end-of-sequence token
is left. So even a model with random weights emits only schema-valid JSON (unless
``max_tokens`` cuts it short).

The llguidance tokenizer is built from the model's fast tokenizer on the first
constrained request (about a second for a 150k vocabulary) and kept.
"""

from __future__ import annotations

import json
import logging
from typing import Any, cast

import mlx.core as mx
import numpy as np

from mlx_gateway.protocol.messages import Constraint
from mlx_gateway.workers.common.sampling import LogitsProcessor
from mlx_gateway.workers.lm.chat_format import opens_thinking
from mlx_gateway.workers.runtime.contract import RequestError

log = logging.getLogger(__name__)


class Grammars:
    """Builds grammar processors for one model's tokenizer (a mlx-lm ``TokenizerWrapper``)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._ll_tokenizer: Any = None
        self._specials: dict[str, str] | None = None

    def _llg(self) -> Any:
        if self._ll_tokenizer is None:
            import llguidance.hf
            from transformers import PreTrainedTokenizerFast

            hf = getattr(self._tokenizer, "_tokenizer", self._tokenizer)
            if not isinstance(hf, PreTrainedTokenizerFast):
                raise RequestError(
                    "constrained decoding (response_format json_schema/json_object, forced "
                    "tool calls) needs a model with a fast tokenizer (tokenizer.json)",
                    param="response_format",
                    code="unsupported_tokenizer",
                )
            eos = sorted(self._tokenizer.eos_token_ids)
            self._ll_tokenizer = llguidance.hf.from_tokenizer(hf, eos_token=eos)
        return self._ll_tokenizer

    def _special_tokens_as_refs(self, lark: str) -> str:
        """Quoted literals that are a special token's text (``"<|tool_call>"``) become
        references to that token (``<[id]>``): llguidance matches quoted text as
        bytes, and a special token has none, so the literal alone could never be
        produced by the token the model actually uses."""
        if self._specials is None:
            hf = getattr(self._tokenizer, "_tokenizer", self._tokenizer)
            added = getattr(hf, "added_tokens_decoder", {}) or {}
            ll = self._llg()
            self._specials = {
                json.dumps(str(token)): f"<[{token_id}]>"
                for token_id, token in added.items()
                if token_id < ll.vocab_size and ll.is_special_token(token_id)
            }
        for literal, ref in self._specials.items():
            if literal in lark:
                lark = lark.replace(literal, ref)
        return lark

    def processor(self, constraint: Constraint, prompt: list[int]) -> LogitsProcessor:
        """A fresh processor for one request with these ``prompt`` tokens. When the
        prompt ends inside an open thinking block, the grammar applies only after
        the model closed it (the thinking itself is free text).

        Raises :class:`RequestError` (400, ``param`` from the constraint) when the
        grammar does not compile."""
        import llguidance

        tokenizer = self._llg()
        try:
            lark = self._special_tokens_as_refs(constraint.grammar)
            grammar = llguidance.LLMatcher.grammar_from_lark(lark)
            is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
                grammar, tokenizer
            )
        except (ValueError, TypeError) as exc:
            is_error, messages = True, [str(exc)]
        if is_error:
            detail = messages[0].strip() if messages else "invalid grammar"
            raise RequestError(
                f"invalid {constraint.param}: {detail}",
                param=constraint.param,
                code="invalid_schema",
            )
        matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if matcher.is_error():
            raise RequestError(
                f"invalid {constraint.param}: {matcher.get_error()}",
                param=constraint.param,
                code="invalid_schema",
            )
        think_end = None
        if opens_thinking(self._tokenizer, prompt):
            think_end = list(self._tokenizer.think_end_tokens)
        return GrammarProcessor(matcher, tokenizer, len(prompt), think_end)


class GrammarProcessor:
    """The logits processor of one constrained request.

    mlx-lm calls it as ``processor(tokens, logits)`` with the prompt followed by
    every token generated so far; the tokens after ``prompt_tokens`` that the
    matcher has not seen are fed to it before the next mask is computed. With
    ``think_end`` (token ids), nothing is constrained until the output ends with it."""

    def __init__(
        self,
        matcher: Any,
        tokenizer: Any,
        prompt_tokens: int,
        think_end: list[int] | None = None,
    ) -> None:
        import llguidance.numpy

        self._matcher = matcher
        self._vocab = tokenizer.vocab_size
        self._eos = set(tokenizer.eos_tokens)
        self._seen = prompt_tokens
        self._fill = llguidance.numpy.fill_next_token_bitmask
        self._bitmask = llguidance.numpy.allocate_token_bitmask(1, self._vocab)
        self._failed = False
        self._think_end = think_end

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self._think_end is not None:
            n = len(self._think_end)
            if tokens.shape[-1] - self._seen < n or tokens[-n:].tolist() != self._think_end:
                return logits
            self._seen = tokens.shape[-1]
            self._think_end = None
        if tokens.shape[-1] > self._seen:
            new = cast(list[int], tokens[self._seen :].tolist())
            self._seen += len(new)
            if any(t in self._eos for t in new):
                # The request ends at that token; mlx-lm computes one more step ahead
                # before it sees so, and throws that step away.
                return logits
            if not self._failed and not self._matcher.consume_tokens(new):
                self._fail(f"token(s) {new} rejected")
        allowed = self._allowed(logits.shape[-1])
        return mx.where(allowed, logits, mx.array(-mx.inf, dtype=logits.dtype))

    def _allowed(self, width: int) -> mx.array:
        if not self._failed:
            self._fill(self._matcher, self._bitmask, 0)
            if self._matcher.is_error():
                self._fail(self._matcher.get_error())
        if self._failed:
            bits = np.zeros(width, dtype=bool)
            bits[[t for t in sorted(self._eos) if t < width]] = True
            return mx.array(bits)
        bits = np.unpackbits(self._bitmask.view(np.uint8), bitorder="little")
        # The model's vocabulary may be padded beyond the tokenizer's: never allowed.
        row = np.zeros(width, dtype=bool)
        n = min(width, self._vocab)
        row[:n] = bits[:n]
        return mx.array(row)

    def _fail(self, reason: str) -> None:
        # Ending this one request (only EOS allowed) keeps a grammar problem from
        # failing the step, which would end every request in the batch.
        log.warning("constrained decoding stopped: %s", reason)
        self._failed = True
