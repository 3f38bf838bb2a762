"""Thinking blocks: split a model's output into reasoning and answer.

A reasoning model writes ``<think>…</think>`` (or its family's markers) before its
answer; when the chat template already opened the block in the prompt, the output
starts inside it and only the end marker shows. :class:`ReasoningSplitter` takes
the text as it streams and returns ``("reasoning", text)`` and ``("content",
text)`` pieces, holding back only what may still turn into a marker.

A start marker counts only at the start of the output (after white space): a
model that mentions ``<think>`` in its answer is not thinking. An output that ends
before the end marker was reasoning all along (it was cut by ``max_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mlx_gateway.protocol.parsers import REASONING_PARSER_MARKERS
from mlx_gateway.supervisor.engine.parsers.harmony import HarmonySplitter
from mlx_gateway.supervisor.engine.parsers.markers import held_suffix

Kind = Literal["reasoning", "content"]
Piece = tuple[Kind, str]


@dataclass(frozen=True)
class ThinkMarkers:
    """How one family opens and closes a thinking block."""

    start: str
    end: str
    harmony: bool = False
    """gpt-oss's channels rather than a block (see :mod:`.harmony`)."""


REASONING_PARSERS: dict[str, ThinkMarkers] = {
    "think": ThinkMarkers("<think>", "</think>"),
    "gemma4": ThinkMarkers("<|channel>thought", "<channel|>"),
    "mistral": ThinkMarkers("[THINK]", "[/THINK]"),
    "kimi": ThinkMarkers("◁think▷", "◁/think▷"),
    "longcat": ThinkMarkers("<longcat_think>", "</longcat_think>"),
    "seed": ThinkMarkers("<seed:think>", "</seed:think>"),
    "harmony": ThinkMarkers("<|channel|>analysis<|message|>", "<|end|>", harmony=True),
}
"""The markers by their own name; :data:`...protocol.parsers.REASONING_PARSER_MARKERS`
maps each ``reasoning_parser`` name (aliases included) to one of these."""


def resolve_reasoning(name: str | None, extra: dict[str, str] | None) -> ThinkMarkers | None:
    """The markers for a model: ``name`` is its ``reasoning_parser`` (``None`` or
    ``auto``: the markers its worker found in the vocabulary, from ``extra``, the
    worker's ``ModelFacts.extra``); ``none`` turns splitting off."""
    if name in (None, "auto"):
        if (extra or {}).get("reasoning_parser") == "harmony":
            return REASONING_PARSERS["harmony"]
        start, end = (extra or {}).get("think_start"), (extra or {}).get("think_end")
        return ThinkMarkers(start, end) if start and end else None
    if name == "none":
        return None
    return REASONING_PARSERS[REASONING_PARSER_MARKERS.get(name, name)]


def make_splitter(markers: ThinkMarkers, *, inside: bool = False) -> Splitter:
    """The splitter for one output with ``markers`` (``inside``: the prompt opened
    the block)."""
    if markers.harmony:
        return HarmonySplitter()
    return ReasoningSplitter(markers, inside=inside)


class ReasoningSplitter:
    """Splits one output stream (see the module docstring)."""

    def __init__(self, markers: ThinkMarkers, *, inside: bool = False) -> None:
        self._markers = markers
        self._state: Literal["start", "reasoning", "content"] = "reasoning" if inside else "start"
        self._buffer = ""
        self._trim = False
        """Drop the white space between the end marker and the answer."""
        self.reasoned = inside
        """Whether the output had a thinking block."""

    def feed(self, text: str) -> list[Piece]:
        """Take the next piece of output; return what can be told apart now."""
        self._buffer += text
        out: list[Piece] = []
        while self._buffer:
            if self._state == "start":
                if not self._leave_start():
                    break
            elif self._state == "reasoning":
                if not self._scan_reasoning(out):
                    break
            else:
                self._content(out, self._buffer)
                self._buffer = ""
        return out

    def finish(self) -> list[Piece]:
        """The output ended: everything still held back."""
        out: list[Piece] = []
        rest, self._buffer = self._buffer, ""
        if rest:
            if self._state == "reasoning":
                out.append(("reasoning", rest))
            else:
                self._content(out, rest)
        return out

    def _leave_start(self) -> bool:
        """In front of the output: a start marker opens reasoning, anything else is
        the answer. False while the text so far may still become the marker."""
        start = self._markers.start
        stripped = self._buffer.lstrip()
        if stripped.startswith(start):
            self._buffer = stripped[len(start) :]
            self._state = "reasoning"
            self.reasoned = True
            return True
        if not stripped or start.startswith(stripped):
            return False
        self._state = "content"
        return True

    def _scan_reasoning(self, out: list[Piece]) -> bool:
        end = self._markers.end
        cut = self._buffer.find(end)
        if cut >= 0:
            if cut:
                out.append(("reasoning", self._buffer[:cut]))
            self._buffer = self._buffer[cut + len(end) :]
            self._state = "content"
            self._trim = True
            return True
        keep = held_suffix(self._buffer, (end,))
        ready = self._buffer[: len(self._buffer) - keep]
        if ready:
            out.append(("reasoning", ready))
        self._buffer = self._buffer[len(self._buffer) - keep :]
        return False

    def _content(self, out: list[Piece], text: str) -> None:
        if self._trim:
            text = text.lstrip()
            if not text:
                return
            self._trim = False
        out.append(("content", text))


Splitter = ReasoningSplitter | HarmonySplitter
