"""Tool calls in a model's text: the formats, and the streaming parser they share.

Every family marks its calls in the text: Hermes/Qwen wrap JSON in
``<tool_call>…</tool_call>``, Qwen3-Coder writes XML inside the same tags, Gemma
writes ``call:name{…}`` between its own tokens, Llama 3 answers with a bare JSON
object. A :class:`ToolFormat` knows one family's markers, how to read the text of
one call section, and the grammar that makes a model write a call in it.

:class:`ToolCallStream` runs on the streamed answer: text outside call sections
passes through as it comes (less what may be the start of a marker), a section
is held until it closes and then comes out as parsed calls. A section that does
not parse is passed on as text, so nothing the model wrote is lost, except a call
the token limit cut off: that one is dropped (see :meth:`ToolCallStream.finish`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from mlx_gateway.supervisor.engine.parsers.markers import held_suffix

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Function:
    """A function tool the request offers the model."""

    name: str
    parameters: dict[str, Any] = field(default_factory=dict)
    """Its JSON schema (``{}``: any arguments)."""
    description: str | None = None
    strict: bool = False


@dataclass(frozen=True)
class ParsedCall:
    """One call found in the text: ``arguments`` is the JSON text of an object."""

    name: str
    arguments: str


def arguments_json(arguments: Any) -> str:
    """The JSON text of a call's arguments (a JSON string stays as written)."""
    if isinstance(arguments, str):
        try:
            json.loads(arguments)
        except ValueError:
            return json.dumps(arguments, ensure_ascii=False)
        return arguments
    return json.dumps({} if arguments is None else arguments, ensure_ascii=False)


class ToolFormat(Protocol):
    """One family's way of writing tool calls."""

    name: str
    start: str
    """The marker that opens a call section."""
    end: str
    """The marker that closes it; empty: the section runs to the end of the output."""
    leading: tuple[str, ...]
    """Prefixes that, at the very start of the answer, open a section running to
    the end of the output (formats whose calls carry no marker)."""

    def parse(self, body: str, tools: Sequence[Function]) -> list[ParsedCall]:
        """The calls in one section's text (between the markers); raise
        ``ValueError`` (or return ``[]``) when it is not a call."""
        ...

    def grammar(self, tools: Sequence[Function], parallel: bool) -> str | None:
        """A Lark grammar (llguidance dialect) for one call to one of ``tools`` or,
        with ``parallel``, one or more calls; ``None`` when the format has none."""
        ...


_CALL_HEAD = '{"name"'


def _call_like(text: str) -> bool:
    """Whether an unmarked section (a Llama 3 answer starting with ``{``) reads as a
    call so far: ``{"name"`` or the start of it, white space aside. A cut JSON
    answer of any other shape stays the model's text."""
    head = "".join(text[: len(_CALL_HEAD) * 4].split())[: len(_CALL_HEAD)]
    return head.startswith(_CALL_HEAD) or _CALL_HEAD.startswith(head)


Event = str | ParsedCall
"""What the stream yields: answer text, or a parsed call."""


class ToolCallStream:
    """Parses one output stream (see the module docstring)."""

    def __init__(self, fmt: ToolFormat, tools: Sequence[Function], *, parallel: bool = True):
        self._fmt = fmt
        self._tools = tools
        self._parallel = parallel
        self._buffer = ""
        self._in_call = False
        self._space = ""
        """White space held back: dropped when a call follows it, else sent."""
        self._spoke = False
        """Some text other than white space went out."""
        self.calls = 0
        self.cut_call = False
        """The token limit cut off a call (see :meth:`finish`)."""

    def feed(self, text: str) -> list[Event]:
        """Take the next piece of answer text; return what is settled now."""
        self._buffer += text
        out: list[Event] = []
        while self._buffer:
            if self._in_call:
                end = self._fmt.end
                cut = self._buffer.find(end) if end else -1
                if cut < 0:
                    break
                body = self._buffer[:cut]
                self._buffer = self._buffer[cut + len(end) :]
                self._in_call = False
                self._section(out, body, self._fmt.start + body + end)
                continue
            if not self._spoke and self._fmt.leading:
                stripped = self._buffer.lstrip()
                if any(stripped.startswith(p) for p in self._fmt.leading):
                    break  # the whole output is a call section: wait for the end
                if not stripped or any(p.startswith(stripped) for p in self._fmt.leading):
                    break
            start = self._fmt.start
            cut = self._buffer.find(start) if start else -1
            if cut >= 0:
                self._text(out, self._buffer[:cut])
                self._buffer = self._buffer[cut + len(start) :]
                self._in_call = True
                continue
            keep = held_suffix(self._buffer, (start,)) if start else 0
            self._text(out, self._buffer[: len(self._buffer) - keep])
            self._buffer = self._buffer[len(self._buffer) - keep :]
            break
        return out

    def finish(self, cut: bool = False) -> list[Event]:
        """The output ended: parse an open section, send what was held back.

        ``cut``: the token limit ended it, so an open section is a call cut off
        midway. It is dropped, not sent as text (a client would feed the half
        call back to the model as its words), and :attr:`cut_call` is set. So is
        a held-back start of a marker. A section that needs no end marker still
        counts when it parses (its call was complete when the limit came), and an
        unmarked one (Llama 3) is dropped only if it began as a call (``{"name"``)."""
        out: list[Event] = []
        rest, self._buffer = self._buffer, ""
        if self._in_call:
            if cut and self._fmt.end:
                self._drop(rest)
            elif cut:
                self._section(out, rest, None)
            else:
                self._section(out, rest, self._fmt.start + rest)
        elif rest and not self._spoke and self._fmt.leading:
            stripped = rest.lstrip()
            if any(stripped.startswith(p) for p in self._fmt.leading):
                self._section(out, stripped, None if cut and _call_like(stripped) else rest)
            elif cut and any(p.startswith(stripped) for p in self._fmt.leading):
                self._drop(rest)
            else:
                self._text(out, rest)
        elif rest and cut and held_suffix(rest, (self._fmt.start,)) == len(rest):
            self._drop(rest)
        elif rest:
            self._text(out, rest)
        if self._space and not self.calls and not self.cut_call:
            out.append(self._space)
        self._space = ""
        return out

    def _text(self, out: list[Event], text: str) -> None:
        if not text:
            return
        if not text.strip():
            self._space += text
            return
        out.append(self._space + text)
        self._space = ""
        self._spoke = True

    def _drop(self, text: str) -> None:
        self.cut_call = True
        logger.info("the token limit cut a %s tool call; dropped %r", self._fmt.name, text[:80])

    def _section(self, out: list[Event], body: str, raw: str | None) -> None:
        """Parse one section; ``raw`` is its text to send when it is no call
        (``None``: drop it, it was cut off)."""
        try:
            calls = self._fmt.parse(body, self._tools)
        except (ValueError, KeyError, TypeError, IndexError, SyntaxError, RecursionError) as exc:
            logger.info("a %s tool call did not parse (%s); kept as text", self._fmt.name, exc)
            calls = []
        if not calls:
            if raw is None:
                self._drop(body)
            else:
                self._text(out, raw)
            return
        self._space = ""
        for call in calls:
            if self.calls and not self._parallel:
                logger.info("dropped a second tool call: parallel_tool_calls is false")
                continue
            self.calls += 1
            out.append(call)
