"""Stop sequences on streamed text: never send what is, or could become, a match.

Text arrives in segments (one per decoded token). Whatever could still be the
beginning of a stop string is held back until the next segment decides it; a full
match cuts the text there. Pure functions on strings, no tokenizer involved.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class StopScan(NamedTuple):
    """The outcome of :func:`scan_stops` for one segment."""

    emit: str
    """Text that is safe to send now."""
    held: str
    """The tail that may still grow into a stop string; feed it back next time."""
    stopped: bool
    """A stop string matched: ``emit`` ends right before it and ``held`` is empty."""


def partial_stop_length(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of a stop string."""
    longest = max((len(s) for s in stops), default=0)
    for n in range(min(len(text), longest - 1), 0, -1):
        tail = text[-n:]
        if any(s.startswith(tail) for s in stops):
            return n
    return 0


def scan_stops(held: str, segment: str, stops: Sequence[str], final: bool = False) -> StopScan:
    """Append ``segment`` to the ``held`` text and split it into what can be sent.

    ``stops`` must not contain empty strings. With ``final`` (the stream ended for
    another reason) nothing is held back: a partial match that never completed is
    ordinary text.
    """
    text = held + segment
    # The earliest match wins, whichever stop string it is.
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    if cut >= 0:
        return StopScan(text[:cut], "", True)
    if final:
        return StopScan(text, "", False)
    keep = partial_stop_length(text, stops)
    return StopScan(text[: len(text) - keep], text[len(text) - keep :], False)
