"""The worker's scan for calls in the formats only mlx-lm parses, with mlx-lm's own
parsers: whole calls, calls that do not parse, calls the token limit cut off."""

from __future__ import annotations

from mlx_lm.tool_parsers import json_tools, minimax_m2

from mlx_gateway.workers.lm.tool_scan import ToolScan

CALL = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
MINIMAX = (
    '<minimax:tool_call><invoke name="f"><parameter name="a">1</parameter></invoke>'
    "</minimax:tool_call>"
)
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def scan(text: str, cut: bool, size: int = 3, module: object = json_tools) -> tuple[str, list]:
    tool_scan = ToolScan(
        module.tool_call_start,  # type: ignore[attr-defined]
        module.tool_call_end,  # type: ignore[attr-defined]
        module.parse_tool_call,  # type: ignore[attr-defined]
        TOOLS,
    )
    out, calls = "", []
    pieces = [text[i : i + size] for i in range(0, len(text), size)] or [""]
    for i, piece in enumerate(pieces):
        final = i == len(pieces) - 1
        sent, found = tool_scan.feed(piece, final=final, cut=cut and final)
        out += sent
        calls += found
    return out, calls


def test_whole_calls_parse_either_way() -> None:
    for cut in (False, True):
        assert scan("Sure. " + CALL, cut) == ("Sure. ", [("f", '{"a": 1}')])
        assert scan(MINIMAX, cut, module=minimax_m2) == ("", [("f", '{"a": "1"}')])


def test_an_unfinished_call_is_text_at_the_end_of_the_output() -> None:
    # The model ended (EOS) inside a call that does not parse: its words stay.
    text = "Sure. " + CALL[:30]
    assert scan(text, cut=False) == (text + "</tool_call>", [])
    assert scan("Sure. <tool_ca", cut=False) == ("Sure. <tool_ca", [])


def test_a_call_cut_by_the_token_limit_is_dropped() -> None:
    for end in range(len("Sure. ") + 1, len(CALL) + len("Sure. ")):
        text = ("Sure. " + CALL)[:end]
        for size in (1, 4, 1000):
            assert scan(text, cut=True, size=size) == ("Sure. ", []), text
    for end in range(1, len(MINIMAX)):
        assert scan(MINIMAX[:end], cut=True, module=minimax_m2) == ("", []), MINIMAX[:end]
