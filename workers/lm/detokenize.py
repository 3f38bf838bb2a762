"""mlx-lm's byte-level BPE streaming detokenizer, with each token's text kept.

The worker detokenizes every generated token of every request. mlx-lm's
``BPEStreamingDetokenizer`` maps the characters of each token back to bytes in a
Python loop and decodes them, every time it meets the token, although the answer
depends on the token alone whenever nothing is held back from earlier tokens (a
character split across tokens, a lone space waiting for the next token). On a GPU,
where a step of a small model is mostly Python, that loop was a third of the
worker's own work per token.

:class:`CachedBPEDetokenizer` gives the same text, token for token (the tests run
both on random token sequences): a token that completes its text on its own is
looked up in a table shared by all requests of a tokenizer and filled as tokens
are first seen; any other case (text held back, an id past the vocabulary) takes
mlx-lm's own code.
"""

from __future__ import annotations

from typing import Any

from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer, _byte_decoder

_UNKNOWN = None
_HELD = False
"""Table entries: not seen yet, or a token whose text is held back for the next."""


class CachedBPEDetokenizer(BPEStreamingDetokenizer):
    """A ``BPEStreamingDetokenizer`` whose whole-token texts come from ``table``."""

    def __init__(self, model: BPEStreamingDetokenizer, table: list[str | bool | None]) -> None:
        # Not the parent's __init__: it would convert the whole vocabulary again.
        self.tokenmap = model.tokenmap
        self._table = table
        self.reset()

    def add_token(self, token: int) -> None:
        if self._unflushed or token >= len(self._table):
            super().add_token(token)
            return
        text = self._table[token]
        if text is _UNKNOWN:
            text = self._table[token] = self._whole_text(token)
        if text is _HELD:
            super().add_token(token)
            return
        assert isinstance(text, str)
        self.tokens.append(token)
        if text and text[0] == " " and not self.text:
            text = text[1:]  # the parent's _maybe_trim_space: no leading space at the start
        self.text += text

    def _whole_text(self, token: int) -> str | bool:
        """What the parent adds for ``token`` when nothing is held back, or
        :data:`_HELD` where it holds the token back instead."""
        piece = self.tokenmap[token]
        text = self._decode_bytes(piece)
        lone_space = len(piece) == 1 and _byte_decoder().get(piece[0]) == 32
        return _HELD if text.endswith("\ufffd") or lone_space else text


class Detokenizers:
    """Fresh streaming detokenizers for one tokenizer: the cached kind where it
    uses mlx-lm's byte-level BPE one, else the tokenizer's own."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        model = tokenizer.detokenizer
        self._model = model if type(model) is BPEStreamingDetokenizer else None
        self._table: list[str | bool | None] = (
            [_UNKNOWN] * len(model.tokenmap) if self._model is not None else []
        )

    def new(self) -> Any:
        """A detokenizer for one request."""
        if self._model is None:
            return self._tokenizer.detokenizer
        return CachedBPEDetokenizer(self._model, self._table)
