"""Complete sentences out of text that arrives in pieces (a language model's stream).

Wyoming's streaming synthesis (``synthesize-chunk`` events) and a Realtime session's
spoken response hand over text as an assistant writes it; a sentence is spoken as
soon as it is complete, so the answer starts playing long before it is written to
the end.
"""

from __future__ import annotations

import re

_END = re.compile(r"(?<=[.!?\u2026])\s+|(?<=[\u3002\uff01\uff1f])|\n\s*\n")


class SentenceBuffer:
    """Collects text; hands out every sentence once something follows its end."""

    def __init__(self) -> None:
        self._text = ""

    def add(self, text: str) -> list[str]:
        """Take ``text``; the sentences it completed, in order."""
        self._text += text
        parts = _END.split(self._text)
        self._text = parts.pop()
        return [part.strip() for part in parts if part.strip()]

    def finish(self) -> str:
        """What is left (a last sentence without its end); empties the buffer."""
        rest, self._text = self._text.strip(), ""
        return rest
