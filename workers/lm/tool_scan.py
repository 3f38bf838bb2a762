"""Tool calls read by the tokenizer's own parser (mlx-lm), for formats the gateway
does not parse itself.

mlx-lm infers a model's tool-call format from its chat template and brings a
parser for it (``tokenizer.tool_parser``) with the markers around a call
(``tool_call_start``/``tool_call_end``; an empty end: the call runs to the end of
the output). :class:`ToolScan` runs on a request's outgoing text: text outside the
markers passes (less what may be the start of a marker), a call's text is held
until it closes and then handed to that parser; a call that does not parse goes out
as text, unless the token limit cut it off (then it is dropped).
"""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger(__name__)

ToolCallPair = tuple[str, str]
"""``(name, arguments as JSON text)``."""


def _held(text: str, marker: str) -> int:
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def make_tool_scan(tokenizer: Any, tools: Any) -> ToolScan | None:
    """A scanner for one request, or ``None`` when the tokenizer has no tool parser."""
    if not getattr(tokenizer, "has_tool_calling", False) or tokenizer.tool_parser is None:
        return None
    return ToolScan(
        tokenizer.tool_call_start, tokenizer.tool_call_end or "", tokenizer.tool_parser, tools
    )


class ToolScan:
    """Withholds call text and parses it (see the module docstring)."""

    def __init__(self, start: str, end: str, parse: Any, tools: Any) -> None:
        self._start, self._end = start, end
        self._parse = parse
        self._tools = tools
        self._buffer = ""
        self._inside = False

    def feed(self, text: str, final: bool, cut: bool = False) -> tuple[str, list[ToolCallPair]]:
        """The text that may go out now and the calls completed by ``text``.

        ``cut`` (with ``final``): the token limit ended the output, so an open call
        was cut off midway; it is dropped rather than sent as text, as is a held
        start of a marker (a call with no end marker still counts if it parses)."""
        self._buffer += text
        out: list[str] = []
        calls: list[ToolCallPair] = []
        while self._buffer:
            if self._inside:
                at = self._buffer.find(self._end) if self._end else -1
                if at < 0:
                    break
                body, self._buffer = self._buffer[:at], self._buffer[at + len(self._end) :]
                self._inside = False
                self._call(body, out, calls)
                continue
            at = self._buffer.find(self._start)
            if at >= 0:
                out.append(self._buffer[:at])
                self._buffer = self._buffer[at + len(self._start) :]
                self._inside = True
                continue
            keep = _held(self._buffer, self._start)
            out.append(self._buffer[: len(self._buffer) - keep])
            self._buffer = self._buffer[len(self._buffer) - keep :]
            break
        if final:
            rest, self._buffer = self._buffer, ""
            if self._inside:
                self._inside = False
                if cut and self._end:
                    log.info("the token limit cut a tool call; dropped %r", rest[:80])
                else:
                    self._call(rest, out, calls, keep=not cut)
            elif cut and rest and _held(rest, self._start) == len(rest):
                log.info("the token limit cut a tool-call marker; dropped %r", rest)
            else:
                out.append(rest)
        return "".join(out), calls

    def _call(
        self, body: str, out: list[str], calls: list[ToolCallPair], keep: bool = True
    ) -> None:
        try:
            parsed = self._parse(body, self._tools)
            items = parsed if isinstance(parsed, list) else [parsed]
            found = [(str(c["name"]), _arguments(c.get("arguments"))) for c in items]
        except Exception as exc:  # the parsers raise anything on text that is no call
            if keep:
                log.info("a tool call did not parse (%s); sent as text", exc)
                out.append(self._start + body + self._end)
            else:
                log.info("the token limit cut a tool call; dropped %r", body[:80])
            return
        calls.extend(found)


def _arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps({} if arguments is None else arguments, ensure_ascii=False)
