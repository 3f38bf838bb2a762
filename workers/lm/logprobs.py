"""Per-token log-probabilities of one request, aligned with the text it streams.

mlx-lm hands over each step's log-probabilities (after the logits processors, so a
grammar's masked tokens read ``-inf``). A token's *text* is what the streaming
detokenizer added when it took that token; a token that only completes part of a
UTF-8 character has empty text and the one that completes it carries the whole
character, so the texts of all tokens join to the generated text.

The text a request sends lags behind (text that may start a stop string is held
back) and may end early (a stop string cuts it). :class:`LogprobTrack` hands a
token out once all of its text was sent, and at the end clips the token a stop
string cut through and drops the ones after it: the tokens of all chunks join to
exactly the chunks' text.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, cast

import mlx.core as mx

from mlx_gateway.protocol.messages import TokenLogprob

MAX_TOP = 20
"""Most alternatives a request may ask for (OpenAI's limit)."""
FLOOR = -9999.0
"""Stands for ``-inf`` (a token a grammar or filter ruled out): JSON has no infinity."""


@dataclass
class _Token:
    text: str
    logprob: float
    top: list[tuple[str, float]] = field(default_factory=list)


def _finite(value: float) -> float:
    return value if math.isfinite(value) else FLOOR


class LogprobTrack:
    """The log-probabilities of one request's generated tokens (see the module doc)."""

    def __init__(self, tokenizer: Any, top: int) -> None:
        self._tokenizer = tokenizer
        self._top = min(max(top, 0), MAX_TOP)
        self._pending: deque[_Token] = deque()
        self._credit = 0
        """Characters sent but not yet accounted to a handed-out token."""

    def add(self, token: int | None, logprobs: mx.array | None, text: str) -> None:
        """Take one step: the sampled ``token`` with its step's ``logprobs`` (shape
        ``(vocab,)``) and the ``text`` the detokenizer produced for it. ``token``
        ``None`` (an EOS token, which is not reported) gives its text, the flushed
        end of the detokenizer, to the token before it."""
        if token is None or logprobs is None:
            if self._pending and text:
                self._pending[-1].text += text
            return
        entry = _Token(text, _finite(cast(float, logprobs[token].item())))
        if self._top:
            entry.top = self._alternatives(logprobs)
        self._pending.append(entry)

    def _alternatives(self, logprobs: mx.array) -> list[tuple[str, float]]:
        k = self._top
        ids = mx.argpartition(-logprobs, kth=k - 1)[:k]
        values = logprobs[ids]
        order = mx.argsort(-values)
        id_list = cast(list[int], ids[order].tolist())
        value_list = cast(list[float], values[order].tolist())
        return [(self._piece(i), _finite(v)) for i, v in zip(id_list, value_list, strict=True)]

    def _piece(self, token: int) -> str:
        return str(self._tokenizer.decode([token]))

    def _complete(self, entry: _Token) -> bool:
        # A token with no text yet (part of a character) waits for a later token:
        # while it is the last one, the detokenizer's final flush may still add to it.
        if not entry.text:
            return len(self._pending) > 1
        return len(entry.text) <= self._credit

    def release(self, sent: int, final: bool) -> list[TokenLogprob]:
        """The tokens whose text is complete once ``sent`` more characters went out.
        With ``final`` every remaining token is settled: the one the end of the
        text cuts through is clipped, those after it are dropped."""
        self._credit += sent
        out: list[TokenLogprob] = []
        while self._pending and self._complete(self._pending[0]):
            entry = self._pending.popleft()
            self._credit -= len(entry.text)
            out.append(TokenLogprob(entry.text, entry.logprob, entry.top))
        if final:
            if self._pending and self._credit:
                entry = self._pending[0]
                out.append(TokenLogprob(entry.text[: self._credit], entry.logprob, entry.top))
            self._pending.clear()
            self._credit = 0
        return out
