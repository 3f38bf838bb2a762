"""Finding markers in streamed text: what to hold back until the next piece decides."""

from __future__ import annotations

from collections.abc import Iterable


def held_suffix(text: str, markers: Iterable[str]) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of one of
    ``markers``: that much must wait, it may still become a marker."""
    longest = 0
    for marker in markers:
        for n in range(min(len(text), len(marker) - 1), longest, -1):
            if marker.startswith(text[-n:]):
                longest = n
                break
    return longest


class StopScanner:
    """Stop sequences on a text stream, applied by the gateway (when it must tell
    which sequence matched). Text that may start a stop sequence is held back."""

    def __init__(self, stops: Iterable[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        self.matched: str | None = None

    def feed(self, text: str) -> str:
        """The text that is safe to send; after a match (see :attr:`matched`) the
        text ends right before the stop sequence and nothing more comes."""
        if self.matched is not None:
            return ""
        text = self._held + text
        hits = [(i, s) for s in self._stops if (i := text.find(s)) >= 0]
        if hits:
            cut, self.matched = min(hits)
            self._held = ""
            return text[:cut]
        keep = held_suffix(text, self._stops)
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep]

    def finish(self) -> str:
        """The output ended without a match: what was held back is ordinary text."""
        rest, self._held = self._held, ""
        return rest if self.matched is None else ""
