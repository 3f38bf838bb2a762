"""Tool-call formats whose calls are JSON objects: Hermes/Qwen, Llama 3, Mistral."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from mlx_gateway.supervisor.engine.parsers.grammars import json_value, lit, repeated
from mlx_gateway.supervisor.engine.parsers.tool_calls import Function, ParsedCall, arguments_json

_decoder = json.JSONDecoder()


def json_objects(text: str) -> list[Any]:
    """Every JSON value in ``text``, one after the other, separated by white space,
    commas or semicolons (the separators models put between calls)."""
    values: list[Any] = []
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos] in " \t\r\n,;":
            pos += 1
        if pos >= end:
            return values
        value, pos = _decoder.raw_decode(text, pos)
        values.append(value)


def call_of(obj: Any, arguments_key: str = "arguments") -> ParsedCall:
    """A call from ``{"name": …, "arguments": {…}}`` (or ``parameters`` for ``arguments``)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise ValueError("not a tool call object")
    arguments = obj.get(arguments_key, obj.get("parameters", obj.get("arguments")))
    return ParsedCall(obj["name"], arguments_json(arguments))


def _calls(text: str, arguments_key: str = "arguments") -> list[ParsedCall]:
    calls = []
    for value in json_objects(text):
        for obj in value if isinstance(value, list) else [value]:
            calls.append(call_of(obj, arguments_key))
    return calls


def envelope(function: Function, arguments_key: str) -> str:
    """``{"name": "<name>", "<arguments_key>": <arguments>}`` as a Lark expression,
    the arguments a JSON value of the function's own schema (kept as its own
    document, so its ``$ref``s still resolve)."""
    head = lit(f'{{"name": {json.dumps(function.name)}, "{arguments_key}": ')
    return f"{head} {json_value(function.parameters)} {lit('}')}"


class Hermes:
    """``<tool_call>{"name": …, "arguments": {…}}</tool_call>``: Hermes, Qwen 2.5,
    Qwen 3 and most fine-tunes (mlx-lm's ``json_tools``)."""

    name = "hermes"
    start = "<tool_call>"
    end = "</tool_call>"
    leading: tuple[str, ...] = ()

    def parse(self, body: str, tools: Sequence[Function]) -> list[ParsedCall]:
        return _calls(body)

    def grammar(self, tools: Sequence[Function], parallel: bool) -> str:
        rules = [
            f"{lit(self.start)} {lit(chr(10))} {envelope(f, 'arguments')} {lit(chr(10))} "
            f"{lit(self.end)}"
            for f in tools
        ]
        return repeated([f"({r})" for r in rules], parallel, "\n")


class Llama3Json:
    """Llama 3.1+ JSON calls: ``{"name": …, "parameters": {…}}`` as the whole answer,
    or after ``<|python_tag|>``; several are separated by ``;``."""

    name = "llama3_json"
    start = "<|python_tag|>"
    end = ""
    leading: tuple[str, ...] = ("{",)

    def parse(self, body: str, tools: Sequence[Function]) -> list[ParsedCall]:
        return _calls(body, "parameters")

    def grammar(self, tools: Sequence[Function], parallel: bool) -> str:
        rules = [f"({envelope(f, 'parameters')})" for f in tools]
        return repeated(rules, parallel, "; ")


class MistralJson:
    """Mistral: ``[TOOL_CALLS]`` then a JSON list of ``{"name", "arguments"}``
    objects, or (newer templates) ``name[ARGS]{…}`` for each call; no end marker."""

    name = "mistral"
    start = "[TOOL_CALLS]"
    end = ""
    leading: tuple[str, ...] = ()

    def parse(self, body: str, tools: Sequence[Function]) -> list[ParsedCall]:
        text = body.strip()
        if text.startswith("["):
            return _calls(text)
        calls = []
        for part in text.split(self.start):
            name, sep, rest = part.partition("[ARGS]")
            if not sep:
                raise ValueError("no [ARGS] after the function name")
            (arguments,) = json_objects(rest)
            calls.append(ParsedCall(name.strip(), arguments_json(arguments)))
        return calls

    def grammar(self, tools: Sequence[Function], parallel: bool) -> str:
        rules = [f"({envelope(f, 'arguments')})" for f in tools]
        call = " | ".join(rules)
        more = f" ({lit(', ')} call)*" if parallel else ""
        return f"start: {lit(self.start)} {lit('[')} call{more} {lit(']')}\ncall: {call}\n"
