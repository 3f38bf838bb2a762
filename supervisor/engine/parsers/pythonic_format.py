"""Python-call tool calls: ``<|tool_call_start|>[get_weather(city="Paris")]<|tool_call_end|>``
(LFM2 and other models whose templates list calls as Python expressions)."""

from __future__ import annotations

import ast
import json
from collections.abc import Sequence
from typing import Any

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


class Pythonic:
    """``[f(a=1), g(b="x")]`` between ``<|tool_call_start|>`` and ``<|tool_call_end|>``."""

    name = "pythonic"
    start = "<|tool_call_start|>"
    end = "<|tool_call_end|>"
    leading: tuple[str, ...] = ()

    def parse(self, body: str, tools: Sequence[Function]) -> list[ParsedCall]:
        tree = ast.parse(body.strip(), mode="eval").body
        nodes = tree.elts if isinstance(tree, ast.List) else [tree]
        calls = []
        for node in nodes:
            if not isinstance(node, ast.Call) or node.args:
                raise ValueError("not a keyword-argument call")
            arguments = {kw.arg: _literal(kw.value) for kw in node.keywords if kw.arg}
            calls.append(ParsedCall(_name(node.func), json.dumps(arguments, ensure_ascii=False)))
        return calls

    def grammar(self, tools: Sequence[Function], parallel: bool) -> None:
        return None  # Python literals have no grammar here: forced calls run unconstrained.
