"""Cut the text of a speech request into pieces synthesized one at a time.

A piece is a sentence (cut after ``.``, ``!``, ``?`` and ``…`` when whitespace follows, after
their CJK forms, and at blank lines); a sentence longer than
:data:`MAX_PIECE` characters is cut again at its last comma, semicolon or colon
before the limit, else at its last space. Each piece's audio goes out as soon as
it is synthesized, so a long text starts playing after its first sentence and a
client that leaves stops the work at the next piece.
"""

from __future__ import annotations

import re

MAX_PIECE = 400
"""Longest piece, in characters (the largest mlx-audio models take about 500
phonemes or a few hundred tokens at once)."""

# CJK text's full stops (U+3002, fullwidth ! and ?) need no space after them
_SENTENCE_END = re.compile("(?<=[.!?\u2026])\\s+|(?<=[\u3002\uff01\uff1f])\\s*|\n\\s*\n")
_SOFT_BREAKS = (", ", "; ", ": ", "\uff0c", "\u3001")


def split_text(text: str, limit: int = MAX_PIECE) -> list[str]:
    """``text`` as a list of non-empty pieces of at most ``limit`` characters, in
    order; joined with spaces they hold every word of ``text``."""
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(text):
        sentence = " ".join(sentence.split())
        while len(sentence) > limit:
            cut = _cut_point(sentence, limit)
            pieces.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if sentence:
            pieces.append(sentence)
    return [piece for piece in pieces if piece]


def _cut_point(sentence: str, limit: int) -> int:
    """Where to cut a sentence that is longer than ``limit``: after a clause, else
    before a word, else (one endless word) at the limit."""
    head = sentence[:limit]
    clause = max(head.rfind(mark) + len(mark) for mark in _SOFT_BREAKS)
    if clause > limit // 3:
        return clause
    space = head.rfind(" ")
    return space if space > 0 else limit
