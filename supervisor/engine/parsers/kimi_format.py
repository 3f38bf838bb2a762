"""Kimi-K2's tool calls: a section of calls, each its id (``functions.<name>:<n>``)
and JSON arguments between special tokens::

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

(on one line; the id's number counts the calls of the conversation).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from mlx_gateway.supervisor.engine.parsers.grammars import json_value, lit
from mlx_gateway.supervisor.engine.parsers.tool_calls import Function, ParsedCall, arguments_json

CALL_BEGIN = "<|tool_call_begin|>"
ARGUMENTS_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"

_CALL = re.compile(
    r"\s*"
    + re.escape(CALL_BEGIN)
    + r"\s*(?:functions\.)?([\w.\-]+?)(?::\d+)?\s*"
    + re.escape(ARGUMENTS_BEGIN)
    + r"(.*?)"
    + re.escape(CALL_END)
    + r"\s*",
    re.DOTALL,
)


class KimiK2:
    """Kimi-K2 and K2-Thinking (mlx-lm's and vLLM's ``kimi_k2``)."""

    name = "kimi_k2"
    start = "<|tool_calls_section_begin|>"
    end = "<|tool_calls_section_end|>"
    leading: tuple[str, ...] = ()

    def parse(self, body: str, tools: Sequence[Function]) -> list[ParsedCall]:
        calls = []
        pos = 0
        while (match := _CALL.match(body, pos)) is not None:
            arguments = json.loads(match.group(2))
            if not isinstance(arguments, dict):
                raise ValueError("the arguments are not a JSON object")
            calls.append(ParsedCall(match.group(1), arguments_json(arguments)))
            pos = match.end()
        if not calls or body[pos:].strip():
            raise ValueError("not a call, or text after it")
        return calls

    def grammar(self, tools: Sequence[Function], parallel: bool) -> str:
        calls = " | ".join(
            f"({lit(CALL_BEGIN)} {lit(f'functions.{f.name}:')} /[0-9]{{1,3}}/ "
            f"{lit(ARGUMENTS_BEGIN)} {json_value(f.parameters)} {lit(CALL_END)})"
            for f in tools
        )
        more = " call*" if parallel else ""
        return f"start: {lit(self.start)} call{more} {lit(self.end)}\ncall: {calls}\n"
