"""OpenAI's harmony format (gpt-oss): the output is a run of messages, each a
header naming its channel, then ``<|message|>`` and its text::

    <|channel|>analysis<|message|>The user wants the weather.<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json
    <|message|>{"city": "Paris"}<|call|>

(the first header's ``<|start|>assistant`` is in the prompt). ``analysis`` is the
model's reasoning; ``final`` is the answer; a message with a recipient
(``to=functions.<name>``, in the header before or after the channel) is a tool
call whose text is the JSON arguments; ``commentary`` without one is a preamble
the user sees. ``<|call|>`` and ``<|return|>`` end the output (they are end-of-
sequence tokens, so their text usually never arrives: the output's end closes the
last message as well).

:class:`HarmonySplitter` takes the place of the thinking-block splitter: it sends
analysis text as reasoning and final and preamble text as content, streaming, and
holds a tool call's message until it closes, then sends it as content in the one
canonical form the :class:`Harmony` tool format parses, so the tool-call stream
handles it as any other format's section.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Literal

from mlx_gateway.supervisor.engine.parsers.grammars import json_value, lit
from mlx_gateway.supervisor.engine.parsers.markers import held_suffix
from mlx_gateway.supervisor.engine.parsers.tool_calls import Function, ParsedCall, arguments_json

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
END, CALL, RETURN, CONSTRAIN = "<|end|>", "<|call|>", "<|return|>", "<|constrain|>"
_CLOSERS = (END, CALL, RETURN, START)
_OPENERS = (CHANNEL, START)

CALL_HEAD = f"{CHANNEL}commentary to="
"""How a tool call's message begins in the splitter's canonical form (the
:class:`Harmony` format's start marker)."""

_RECIPIENT = re.compile(r"to=([^\s<]+)")
_CHANNEL_NAME = re.compile(re.escape(CHANNEL) + r"\s*([^\s<]+)")

Piece = tuple[Literal["reasoning", "content"], str]


class HarmonySplitter:
    """Splits a harmony output stream into reasoning and content (see the module
    docstring); the interface of :class:`.reasoning.ReasoningSplitter`."""

    def __init__(self) -> None:
        self._state: Literal["lead", "header", "body", "plain"] = "lead"
        self._buffer = ""
        self._channel = ""
        self._recipient: str | None = None
        self._call = ""
        self.reasoned = False

    def feed(self, text: str) -> list[Piece]:
        self._buffer += text
        out: list[Piece] = []
        while self._buffer:
            if self._state == "plain":
                out.append(("content", self._buffer))
                self._buffer = ""
            elif self._state == "lead":
                stripped = self._buffer.lstrip()
                if any(stripped.startswith(m) for m in _OPENERS):
                    self._buffer, self._state = stripped, "header"
                elif not stripped or any(m.startswith(stripped) for m in _OPENERS):
                    break
                else:
                    self._state = "plain"  # not harmony: the model's plain text
            elif self._state == "header":
                at = self._buffer.find(MESSAGE)
                if at < 0:
                    break
                self._open(self._buffer[:at])
                self._buffer = self._buffer[at + len(MESSAGE) :]
            elif not self._body(out):
                break
        return out

    def finish(self) -> list[Piece]:
        """The output ended: it closes the open message (a tool call's without its
        ``<|call|>``, so the tool-call stream can tell a call the token limit cut)."""
        out: list[Piece] = []
        rest, self._buffer = self._buffer, ""
        if self._state == "plain" or (self._state == "lead" and rest.strip()):
            out.append(("content", rest))
        elif self._state == "body":
            if self._recipient is None:
                self._send(out, rest)
            else:
                out.append(("content", self._canonical(self._call + rest)))
        return out

    def _open(self, header: str) -> None:
        """A message's header: its channel and recipient."""
        channel = _CHANNEL_NAME.search(header)
        recipient = _RECIPIENT.search(header)
        self._channel = channel.group(1) if channel else ""
        self._recipient = recipient.group(1) if recipient else None
        self._call = ""
        self._state = "body"
        if self._channel == "analysis" and self._recipient is None:
            self.reasoned = True

    def _body(self, out: list[Piece]) -> bool:
        """Send what is settled of a message's text; False when waiting for more."""
        hits = [(at, m) for m in _CLOSERS if (at := self._buffer.find(m)) >= 0]
        if not hits:
            keep = held_suffix(self._buffer, _CLOSERS)
            ready = self._buffer[: len(self._buffer) - keep]
            self._buffer = self._buffer[len(self._buffer) - keep :]
            if self._recipient is None:
                self._send(out, ready)
            else:
                self._call += ready
            return False
        at, marker = min(hits)
        text = self._buffer[:at]
        # A new <|start|> with no end before it closes the message as well.
        self._buffer = self._buffer[at + (0 if marker == START else len(marker)) :]
        if self._recipient is None:
            self._send(out, text)
        else:
            out.append(("content", self._canonical(self._call + text) + CALL))
        self._state = "header"
        return True

    def _send(self, out: list[Piece], text: str) -> None:
        if text:
            out.append(("reasoning" if self._channel == "analysis" else "content", text))

    def _canonical(self, arguments: str) -> str:
        return f"{CALL_HEAD}{self._recipient} {CONSTRAIN}json{MESSAGE}{arguments}"


class Harmony:
    """Tool calls in harmony messages, as :class:`HarmonySplitter` sends them:
    ``<|channel|>commentary to=functions.<name> <|constrain|>json<|message|>{…}<|call|>``."""

    name = "harmony"
    start = CALL_HEAD
    end = CALL
    leading: tuple[str, ...] = ()

    def parse(self, body: str, tools: Sequence[Function]) -> list[ParsedCall]:
        head, sep, arguments = body.partition(MESSAGE)
        if not sep or not head.split():
            raise ValueError("no recipient or no message")
        recipient = head.split()[0]
        name = recipient.removeprefix("functions.")
        value = json.loads(arguments) if arguments.strip() else {}
        if not isinstance(value, dict):
            raise ValueError("the arguments are not a JSON object")
        return [ParsedCall(name, arguments_json(value))]

    def grammar(self, tools: Sequence[Function], parallel: bool) -> str:
        # One call: <|call|> ends the output, so a harmony turn holds one call.
        # The call opens the answer (no analysis message first: a free-text
        # message could run on to the token limit).
        calls = " | ".join(
            f"({lit(f'commentary to=functions.{f.name} ')} {lit(CONSTRAIN)} {lit('json')} "
            f"{lit(MESSAGE)} {json_value(f.parameters)})"
            for f in tools
        )
        return f"start: {lit(CHANNEL)} call\ncall: {calls}\n"
