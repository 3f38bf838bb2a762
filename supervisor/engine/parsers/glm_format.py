"""GLM-4.5/4.6 and GLM-4.7 tool calls: the function name, then each argument as a
key and a value between tags, inside ``<tool_call>…</tool_call>``::

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

GLM-4.7 writes the same without the line breaks. A string value is raw text, any
other value JSON (the chat template writes ``tojson`` for non-strings); the
function's schema decides which (see :func:`.xml_format.convert`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from mlx_gateway.supervisor.engine.parsers.grammars import lit, repeated
from mlx_gateway.supervisor.engine.parsers.tool_calls import Function, ParsedCall
from mlx_gateway.supervisor.engine.parsers.xml_format import (
    convert,
    properties,
    required,
    value_rule,
)

_NAME = re.compile(r"\s*([\w.\-]+)\s*")
_ARGUMENT = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>\s*", re.DOTALL)


class Glm45:
    """GLM-4.5 and GLM-4.6 (vLLM's ``glm45``/``glm4_moe``): one call per section,
    a line break after the name and after each tag pair."""

    name = "glm45"
    start = "<tool_call>"
    end = "</tool_call>"
    leading: tuple[str, ...] = ()
    newline = "\n"

    def parse(self, body: str, tools: Sequence[Function]) -> list[ParsedCall]:
        head = _NAME.match(body)
        if head is None:
            raise ValueError("no function name")
        props = properties(next((t for t in tools if t.name == head.group(1)), None))
        arguments = {}
        pos = head.end()
        while (match := _ARGUMENT.match(body, pos)) is not None:
            key = match.group(1).strip()
            arguments[key] = convert(match.group(2), props.get(key))
            pos = match.end()
        if body[pos:].strip():
            raise ValueError("text after the arguments")
        return [ParsedCall(head.group(1), json.dumps(arguments, ensure_ascii=False))]

    def grammar(self, tools: Sequence[Function], parallel: bool) -> str:
        rules = [self._call_rule(f) for f in tools]
        return repeated(rules, parallel, self.newline) + "XMLTEXT: /[^<]*/\n"

    def _call_rule(self, function: Function) -> str:
        nl = self.newline
        needed = required(function)
        parts = [lit(self.start), lit(function.name + nl)]
        for key, schema in properties(function).items():
            pair = " ".join(
                [
                    lit("<arg_key>"),
                    lit(key),
                    lit("</arg_key>"),
                    *([lit(nl)] if nl else []),
                    lit("<arg_value>"),
                    value_rule(schema),
                    lit("</arg_value>"),
                    *([lit(nl)] if nl else []),
                ]
            )
            parts.append(pair if key in needed else f"({pair})?")
        parts.append(lit(self.end))
        return "(" + " ".join(parts) + ")"


class Glm47(Glm45):
    """GLM-4.7 (mlx-lm's ``glm47``): the same tags with no line breaks."""

    name = "glm47"
    newline = ""
