"""Gemma's tool calls: ``call:name{key:value,…}`` between the family's markers.

* FunctionGemma: ``<start_function_call>call:f{city:<escape>Paris<escape>}<end_function_call>``
* Gemma 4: ``<|tool_call>call:f{city:<|"|>Paris<|"|>}<tool_call|>``

Keys are bare words; strings sit between the escape marker; numbers, booleans,
lists and nested objects are written as in JSON (nested keys bare too).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from mlx_gateway.supervisor.engine.parsers.grammars import (
    choices,
    json_value,
    lit,
    raw_text,
    repeated,
)
from mlx_gateway.supervisor.engine.parsers.tool_calls import Function, ParsedCall

_CALL_HEAD = re.compile(r"\s*call:([\w.\-]+)\s*\{")
_BARE_KEY = re.compile(r"([{,]\s*)([A-Za-z_][\w\-]*)\s*:")


def _to_json(args: str, quote: str) -> str:
    """Gemma's argument text (``{key:<q>text<q>,n:1}``) as JSON text."""
    out: list[str] = []
    pos = 0
    while True:
        start = args.find(quote, pos)
        if start < 0:
            out.append(_BARE_KEY.sub(r'\1"\2":', args[pos:]))
            return "".join(out)
        stop = args.find(quote, start + len(quote))
        if stop < 0:
            raise ValueError("unterminated string")
        out.append(_BARE_KEY.sub(r'\1"\2":', args[pos:start]))
        out.append(json.dumps(args[start + len(quote) : stop], ensure_ascii=False))
        pos = stop + len(quote)


def _braced(text: str, start: int, quote: str) -> int:
    """The index after the ``}`` closing the ``{`` at ``start`` (strings skipped)."""
    depth, pos = 0, start
    while pos < len(text):
        if text.startswith(quote, pos):
            close = text.find(quote, pos + len(quote))
            if close < 0:
                break
            pos = close + len(quote)
            continue
        char = text[pos]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return pos + 1
        pos += 1
    raise ValueError("unbalanced braces")


class _GemmaCalls:
    name: str
    start: str
    end: str
    quote: str
    leading: tuple[str, ...] = ()

    def parse(self, body: str, tools: Sequence[Function]) -> list[ParsedCall]:
        calls = []
        pos = 0
        while (match := _CALL_HEAD.match(body, pos)) is not None:
            brace = match.end() - 1
            after = _braced(body, brace, self.quote)
            arguments = json.loads(_to_json(body[brace:after], self.quote))
            calls.append(ParsedCall(match.group(1), json.dumps(arguments, ensure_ascii=False)))
            pos = after
            # Several calls in one section follow each other, maybe with markers between.
            rest = body[pos:].lstrip()
            for marker in (self.end, self.start):
                if marker and rest.startswith(marker):
                    rest = rest[len(marker) :]
            pos = len(body) - len(rest)
        if not calls or body[pos:].strip():
            raise ValueError("not a call, or text after the call")
        return calls

    def grammar(self, tools: Sequence[Function], parallel: bool) -> str:
        rules = [self._call_rule(f) for f in tools]
        return repeated(rules, parallel) + f"GEMMASTR: /[^{re.escape(self.quote[0])}]*/\n"

    def _call_rule(self, function: Function) -> str:
        props = function.parameters.get("properties")
        props = props if isinstance(props, dict) else {}
        required = function.parameters.get("required")
        required = list(required) if isinstance(required, list) else list(props)
        parts = [lit(self.start), lit(f"call:{function.name}{{")]
        # Required keys only, in order: a forced call then always parses and validates.
        for i, key in enumerate(k for k in props if k in required):
            parts.append(lit(("," if i else "") + f"{key}:"))
            parts.append(self._value(props[key]))
        parts += [lit("}"), lit(self.end)]
        return "(" + " ".join(parts) + ")"

    def _value(self, schema: Any) -> str:
        """One argument's value: a string between the escape markers (held to its
        ``enum``, ``const`` or length), a number or a boolean as in JSON."""
        quoted = f"{lit(self.quote)} {{}} {lit(self.quote)}"
        values = choices(schema)
        if values is not None:
            if not all(isinstance(v, str | int | float | bool) for v in values):
                raise ValueError("forced Gemma calls support enums of strings and numbers")
            options = [
                quoted.format(lit(v)) if isinstance(v, str) else lit(json.dumps(v)) for v in values
            ]
            return "(" + " | ".join(options) + ")"
        if isinstance(schema, dict) and schema.get("type") == "string":
            return quoted.format(raw_text(schema, "GEMMASTR", self.quote[0]))
        return _plain_value(schema)


def _plain_value(schema: Any) -> str:
    # Numbers and booleans read the same in JSON and in Gemma's syntax.
    if isinstance(schema, dict) and schema.get("type") in ("integer", "number", "boolean"):
        return json_value(schema)
    raise ValueError("forced Gemma calls support string, number and boolean parameters")


class FunctionGemma(_GemmaCalls):
    """FunctionGemma (mlx-lm's ``function_gemma``)."""

    name = "function_gemma"
    start = "<start_function_call>"
    end = "<end_function_call>"
    quote = "<escape>"


class Gemma4(_GemmaCalls):
    """Gemma 4 (mlx-lm's ``gemma4``)."""

    name = "gemma4"
    start = "<|tool_call>"
    end = "<tool_call|>"
    quote = '<|"|>'
