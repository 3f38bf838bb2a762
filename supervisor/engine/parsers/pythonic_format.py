"""Tool calls written as Python calls with keyword arguments:

* LFM2 and other models whose templates list calls as Python expressions:
  ``<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>``;
* Gemma 3, prompted as Google's function-calling guide shows: a fenced block
  ``` ```tool_code ``` holding one call a line (``print(…)`` around it allowed).

Values are Python literals; templates render nested values as JSON, so ``true``,
``false`` and ``null`` are read too. Forced calls write each value as JSON text
(which Python reads the same), required parameters only, in schema order.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from typing import Any

from mlx_gateway.supervisor.engine.parsers.grammars import json_value, lit, repeated
from mlx_gateway.supervisor.engine.parsers.tool_calls import Function, ParsedCall

_JSON_NAMES = {"true": True, "false": False, "null": None}


def _literal(node: ast.expr) -> Any:
    # Templates render nested values as JSON, so true/false/null appear as names.
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, ast.List):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True) if k}
    return ast.literal_eval(node)


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return f"{_name(func.value)}.{func.attr}"
    raise ValueError("not a function name")


def _call(node: ast.expr) -> ParsedCall:
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "print"
        and len(node.args) == 1
        and not node.keywords
    ):
        node = node.args[0]  # print(f(…)): the call inside
    if not isinstance(node, ast.Call) or node.args:
        raise ValueError("not a keyword-argument call")
    arguments = {kw.arg: _literal(kw.value) for kw in node.keywords if kw.arg}
    return ParsedCall(_name(node.func), json.dumps(arguments, ensure_ascii=False))


def call_rule(function: Function) -> str:
    """A Lark expression for ``name(key=<JSON value>, …)`` (required keys, in order)."""
    props = function.parameters.get("properties")
    props = props if isinstance(props, dict) else {}
    needed = function.parameters.get("required")
    needed = list(needed) if isinstance(needed, list) else list(props)
    parts = [lit(f"{function.name}(")]
    for i, key in enumerate(k for k in props if k in needed):
        parts += [lit((", " if i else "") + f"{key}="), json_value(props[key])]
    parts.append(lit(")"))
    return "(" + " ".join(parts) + ")"


class Pythonic:
    """``[f(a=1), g(b="x")]`` between ``<|tool_call_start|>`` and ``<|tool_call_end|>``."""

    name = "pythonic"
    start = "<|tool_call_start|>"
    end = "<|tool_call_end|>"
    leading: tuple[str, ...] = ()

    def parse(self, body: str, tools: Sequence[Function]) -> list[ParsedCall]:
        tree = ast.parse(body.strip(), mode="eval").body
        nodes = tree.elts if isinstance(tree, ast.List) else [tree]
        return [_call(node) for node in nodes]

    def grammar(self, tools: Sequence[Function], parallel: bool) -> str:
        calls = " | ".join(call_rule(f) for f in tools)
        more = f" ({lit(', ')} call)*" if parallel else ""
        return (
            f"start: {lit(self.start)} {lit('[')} call{more} {lit(']')} {lit(self.end)}\n"
            f"call: {calls}\n"
        )


class ToolCode:
    """Gemma 3: ``` ```tool_code\\nget_weather(city="Paris")\\n``` ```."""

    name = "gemma3"
    start = "```tool_code"
    end = "```"
    leading: tuple[str, ...] = ()

    def parse(self, body: str, tools: Sequence[Function]) -> list[ParsedCall]:
        statements = ast.parse(body.strip(), mode="exec").body
        calls = []
        for statement in statements:
            if not isinstance(statement, ast.Expr):
                raise ValueError("not a call")
            value = statement.value
            for node in value.elts if isinstance(value, ast.List) else [value]:
                calls.append(_call(node))
        if not calls:
            raise ValueError("no call in the block")
        return calls

    def grammar(self, tools: Sequence[Function], parallel: bool) -> str:
        rules = [call_rule(f) for f in tools]
        body = repeated(rules, parallel, "\n").replace("start:", "calls:", 1)
        return f"start: {lit(self.start + chr(10))} calls {lit(chr(10) + self.end)}\n{body}"
