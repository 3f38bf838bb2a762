"""mlx-lm's byte-level BPE streaming detokenizer, with each token's text kept.

The worker detokenizes every generated token of every request. mlx-lm's
``BPEStreamingDetokenizer`` maps the characters of each token back to bytes in a
Python loop and decodes them, every time it meets the token, although the answer
depends on the token alone whenever nothing is held back from earlier tokens (a
character split across tokens, a lone space waiting for the next token). On a GPU,
where a step of a small model is mostly Python, that loop was a third of the
worker's own work per token. It also keeps the whole text as one string that
grows by a copy at every token (``text += piece``), so a long answer costs more
per token the longer it gets.

:class:`CachedBPEDetokenizer` gives the same text, token for token (the tests run
both on random token sequences): a token that completes its text on its own is
looked up in a table shared by all requests of a tokenizer and filled as tokens
are first seen; any other case (text held back, an id past the vocabulary) is
decoded from the held-back characters as mlx-lm does. The text is kept as a list
of pieces: :attr:`~CachedBPEDetokenizer.last_segment` joins only those added since
it was last read, and :attr:`~CachedBPEDetokenizer.text` joins them all (read by
the tests, not per token).
"""

from __future__ import annotations

from typing import Any

from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer, _byte_decoder

_UNKNOWN = None
_HELD = False
"""Table entries: not seen yet, or a token whose text is held back for the next."""

_FALLBACK_PIECE = "!"
"""What mlx-lm's detokenizer reads for an id past its token map (a padded vocabulary)."""


class CachedBPEDetokenizer(BPEStreamingDetokenizer):
    """A ``BPEStreamingDetokenizer`` whose whole-token texts come from ``table``."""

    def __init__(self, model: BPEStreamingDetokenizer, table: list[str | bool | None]) -> None:
        # Not the parent's __init__: it would convert the whole vocabulary again.
        self.tokenmap = model.tokenmap
        self._table = table
        self.reset()

    def reset(self) -> None:
        self.tokens: list[int] = []
        self._unflushed = ""
        self._pieces: list[str] = []
        """The text so far, piece by piece (no empty pieces)."""
        self._read = 0
        """Pieces already returned by :attr:`last_segment`."""

    @property
    def text(self) -> str:  # type: ignore[override]  # the parent's attribute, read-only here
        """The whole text so far."""
        return "".join(self._pieces)

    @property
    def last_segment(self) -> str:
        """The text added since this was last read."""
        pieces, read = self._pieces, self._read
        if read == len(pieces):
            return ""
        self._read = len(pieces)
        return pieces[read] if read + 1 == len(pieces) else "".join(pieces[read:])

    def add_token(self, token: int) -> None:
        self.tokens.append(token)
        if not self._unflushed and token < len(self._table):
            text = self._table[token]
            if text is _UNKNOWN:
                text = self._table[token] = self._whole_text(token)
            if text is not _HELD:
                assert isinstance(text, str)
                self._add(text)
                return
        # Characters held back from earlier tokens (or a token held back itself):
        # decode everything held, and let it go once it is whole.
        piece = self.tokenmap[token] if token < len(self.tokenmap) else _FALLBACK_PIECE
        self._unflushed += piece
        text = self._decode_bytes(self._unflushed)
        if not (text.endswith("\ufffd") or _lone_space(piece)):
            self._add(text)
            self._unflushed = ""

    def finalize(self) -> None:
        """Let go of whatever is held back (the stream ended)."""
        decoder = _byte_decoder()
        held = bytearray(decoder[c] for c in self._unflushed)
        self._add(held.decode("utf-8", "replace"))
        self._unflushed = ""

    def _add(self, text: str) -> None:
        """Append a piece; the text never starts with a space (mlx-lm trims it)."""
        if text and text[0] == " " and not self._pieces:
            text = text[1:]
        if text:
            self._pieces.append(text)

    def _whole_text(self, token: int) -> str | bool:
        """What the text gains from ``token`` when nothing is held back, or
        :data:`_HELD` where the token is held back instead."""
        piece = self.tokenmap[token]
        text = self._decode_bytes(piece)
        return _HELD if text.endswith("\ufffd") or _lone_space(piece) else text


def _lone_space(piece: str) -> bool:
    """Whether a token's characters stand for a single space byte (held back until
    the next token tells whether it starts a word)."""
    return len(piece) == 1 and _byte_decoder().get(piece[0]) == 32


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
