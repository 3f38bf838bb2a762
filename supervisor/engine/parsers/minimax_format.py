"""MiniMax-M2's tool calls: XML invocations inside one section::

    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    <parameter name="days">2</parameter>
    </invoke>
    </minimax:tool_call>

A section holds one ``<invoke>`` per call. A string value is raw text, any other
value JSON, as the function's schema says (see :func:`.xml_format.convert`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from mlx_gateway.supervisor.engine.parsers.grammars import lit
from mlx_gateway.supervisor.engine.parsers.tool_calls import Function, ParsedCall
from mlx_gateway.supervisor.engine.parsers.xml_format import (
    convert,
    properties,
    required,
    value_rule,
)

_NAME = r"(\"[^\"]*\"|'[^']*'|[^>\s]+)"
_INVOKE = re.compile(r"\s*<invoke name=" + _NAME + r"\s*>(.*?)</invoke>\s*", re.DOTALL)
_PARAMETER = re.compile(r"\s*<parameter name=" + _NAME + r"\s*>(.*?)</parameter>\s*", re.DOTALL)


_PARAMETER_END = lit("</parameter>\n")


def _unquoted(name: str) -> str:
    return name[1:-1] if name[:1] in "\"'" and name[-1:] == name[:1] else name


class MiniMaxM2:
    """MiniMax-M2 and M2.5 (mlx-lm's and vLLM's ``minimax_m2``)."""

    name = "minimax_m2"
    start = "<minimax:tool_call>"
    end = "</minimax:tool_call>"
    leading: tuple[str, ...] = ()

    def parse(self, body: str, tools: Sequence[Function]) -> list[ParsedCall]:
        by_name = {t.name: t for t in tools}
        calls = []
        pos = 0
        while (invoke := _INVOKE.match(body, pos)) is not None:
            name = _unquoted(invoke.group(1))
            props = properties(by_name.get(name))
            inner, at, arguments = invoke.group(2), 0, {}
            while (param := _PARAMETER.match(inner, at)) is not None:
                key = _unquoted(param.group(1))
                arguments[key] = convert(param.group(2), props.get(key))
                at = param.end()
            if inner[at:].strip():
                raise ValueError("text between the parameters")
            calls.append(ParsedCall(name, json.dumps(arguments, ensure_ascii=False)))
            pos = invoke.end()
        if not calls or body[pos:].strip():
            raise ValueError("not an invocation, or text after it")
        return calls

    def grammar(self, tools: Sequence[Function], parallel: bool) -> str:
        invokes = " | ".join(self._invoke_rule(f) for f in tools)
        more = " invoke*" if parallel else ""
        return (
            f"start: {lit(self.start)} {lit(chr(10))} invoke{more} {lit(self.end)}\n"
            f"invoke: {invokes}\nXMLTEXT: /[^<]*/\n"
        )

    def _invoke_rule(self, function: Function) -> str:
        needed = required(function)
        parts = [lit(f"<invoke name={json.dumps(function.name)}>\n")]
        for key, schema in properties(function).items():
            param = (
                f"{lit(f'<parameter name={json.dumps(key)}>')} {value_rule(schema)} "
                f"{_PARAMETER_END}"
            )
            parts.append(param if key in needed else f"({param})?")
        parts.append(lit("</invoke>\n"))
        return "(" + " ".join(parts) + ")"
