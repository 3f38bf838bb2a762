"""Qwen3-Coder's XML tool calls (also Qwen 3.5 and Qwen3-Next)::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Parameter values are raw text; their JSON type comes from the function's schema
(a string stays text, a number or an object is read as JSON).
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

_FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)(?:</function>|$)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\s]+)>(.*?)(?:</parameter>|(?=<parameter=)|$)", re.DOTALL)

_STRING_TYPES = {"string", "str", "text", "enum", "char", "varchar"}


def _properties(function: Function | None) -> dict[str, Any]:
    if function is None:
        return {}
    props = function.parameters.get("properties")
    return props if isinstance(props, dict) else {}


def _types(schema: Any) -> set[str]:
    if not isinstance(schema, dict):
        return set()
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind.lower()}
    if isinstance(kind, list):
        return {str(k).lower() for k in kind}
    if "enum" in schema and all(isinstance(v, str) for v in schema["enum"]):
        return {"string"}
    return set()


def convert(raw: str, schema: Any) -> Any:
    """A parameter's text as the JSON value its schema asks for."""
    # One newline around the value belongs to the format, not to the value.
    text = raw[1:] if raw.startswith("\n") else raw
    text = text[:-1] if text.endswith("\n") else text
    kinds = _types(schema)
    if kinds & _STRING_TYPES and not kinds - _STRING_TYPES - {"null"}:
        return None if text == "null" and "null" in kinds else text
    if text.strip().lower() == "null":
        return None
    if kinds & {"boolean", "bool"} and text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    try:
        return json.loads(text)
    except ValueError:
        return text


def value_rule(schema: Any, tail: str = "") -> str:
    """A Lark expression for one parameter's text and then ``tail``: raw text for
    a string (its ``enum``, ``const`` or length kept), else a JSON value of the
    schema (see :func:`.grammars.raw_text` for why ``tail`` belongs here)."""
    values = choices(schema)
    kinds = _types(schema)
    if (values is not None and all(isinstance(v, str) for v in values)) or (
        kinds & _STRING_TYPES and not kinds - _STRING_TYPES
    ):
        return raw_text(schema, "XMLTEXT", "<", tail)
    value = json_value(schema if isinstance(schema, dict) else None)
    return f"{value} {lit(tail)}" if tail else value


def properties(function: Function | None) -> dict[str, Any]:
    """A function's ``properties`` (``{}`` when it has none)."""
    return _properties(function)


def required(function: Function) -> set[str]:
    """The names of a function's required parameters."""
    names = function.parameters.get("required")
    return set(names) if isinstance(names, list) else set()


class Qwen3Coder:
    """``<tool_call><function=name><parameter=p>value</parameter></function></tool_call>``."""

    name = "qwen3_coder"
    start = "<tool_call>"
    end = "</tool_call>"
    leading: tuple[str, ...] = ()

    def parse(self, body: str, tools: Sequence[Function]) -> list[ParsedCall]:
        by_name = {t.name: t for t in tools}
        calls = []
        for match in _FUNCTION.finditer(body):
            name, inner = match.group(1), match.group(2)
            props = _properties(by_name.get(name))
            arguments = {
                key: convert(value, props.get(key)) for key, value in _PARAMETER.findall(inner)
            }
            calls.append(ParsedCall(name, json.dumps(arguments, ensure_ascii=False)))
        return calls

    def grammar(self, tools: Sequence[Function], parallel: bool) -> str:
        rules = [self._function_rule(f) for f in tools]
        return repeated(rules, parallel, "\n") + "XMLTEXT: /[^<]*/\n"

    def _function_rule(self, function: Function) -> str:
        required = function.parameters.get("required")
        required = set(required) if isinstance(required, list) else set()
        parts = [lit(self.start), lit(f"\n<function={function.name}>\n")]
        for key, schema in _properties(function).items():
            opening, closing = lit(f"<parameter={key}>\n"), lit("</parameter>\n")
            param = f"{opening} {value_rule(schema, chr(10))} {closing}"
            parts.append(param if key in required else f"({param})?")
        parts += [lit("</function>\n"), lit(self.end)]
        return "(" + " ".join(parts) + ")"
