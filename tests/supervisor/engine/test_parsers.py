"""The output parsers (pure string code): thinking blocks, every tool-call format,
stop sequences — fed whole and in pieces of every size, as a stream splits them."""

from __future__ import annotations

import json

import pytest

from mlx_gateway.supervisor.engine.parsers.formats import TOOL_FORMATS, resolve_tool_format
from mlx_gateway.supervisor.engine.parsers.markers import StopScanner, held_suffix
from mlx_gateway.supervisor.engine.parsers.reasoning import (
    REASONING_PARSERS,
    ReasoningSplitter,
    resolve_reasoning,
)
from mlx_gateway.supervisor.engine.parsers.tool_calls import Function, ParsedCall, ToolCallStream

TOOLS = [
    Function(
        "get_weather",
        {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "metric": {"type": "boolean"},
            },
            "required": ["city"],
        },
    )
]


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def run_tools(
    fmt: str, text: str, size: int, parallel: bool = True
) -> tuple[str, list[ParsedCall]]:
    stream = ToolCallStream(TOOL_FORMATS[fmt], TOOLS, parallel=parallel)
    events = [e for piece in pieces(text, size) for e in stream.feed(piece)] + stream.finish()
    text_out = "".join(e for e in events if isinstance(e, str))
    return text_out, [e for e in events if isinstance(e, ParsedCall)]


def run_reasoning(
    text: str, size: int, inside: bool = False, name: str = "think"
) -> tuple[str, str]:
    splitter = ReasoningSplitter(REASONING_PARSERS[name], inside=inside)
    out = [p for piece in pieces(text, size) for p in splitter.feed(piece)] + splitter.finish()
    reasoning = "".join(t for kind, t in out if kind == "reasoning")
    return reasoning, "".join(t for kind, t in out if kind == "content")


SIZES = [1, 2, 3, 5, 1000]

CALLS = {
    "hermes": (
        'Sure.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n'
        "</tool_call>",
        "Sure.",
    ),
    "qwen3_coder": (
        "On it.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
        "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
        "On it.",
    ),
    "llama3_json": ('{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}', ""),
    "mistral": (
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]',
        "",
    ),
    "function_gemma": (
        "<start_function_call>call:get_weather{city:<escape>Paris<escape>,days:2}"
        "<end_function_call>",
        "",
    ),
    "gemma4": ('<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>', ""),
    "pythonic": ('<|tool_call_start|>[get_weather(city="Paris", days=2)]<|tool_call_end|>', ""),
}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("fmt", list(CALLS))
def test_every_format_parses_in_any_pieces(fmt: str, size: int) -> None:
    text, before = CALLS[fmt]
    content, calls = run_tools(fmt, text, size)
    assert content.strip() == before.strip()
    (call,) = calls
    assert call.name == "get_weather"
    expected = {"city": "New York" if fmt == "qwen3_coder" else "Paris", "days": 2}
    assert json.loads(call.arguments) == expected


def test_several_calls_and_parallel_false() -> None:
    one = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "A"}}\n</tool_call>'
    text = one + "\n" + one.replace('"A"', '"B"')
    _, calls = run_tools("hermes", text, 4)
    assert [json.loads(c.arguments)["city"] for c in calls] == ["A", "B"]
    _, calls = run_tools("hermes", text, 4, parallel=False)
    assert len(calls) == 1
    llama = '{"name": "get_weather", "parameters": {"city": "A"}}; {"name": "f", "parameters": {}}'
    assert [c.name for c in run_tools("llama3_json", llama, 7)[1]] == ["get_weather", "f"]


def test_text_without_calls_passes_through_unchanged() -> None:
    text = "A <tool or two> and {braces}, nothing more. <tool_"
    for size in SIZES:
        assert run_tools("hermes", text, size) == (text, [])
    assert run_tools("llama3_json", "Plain answer {not a call}", 3) == (
        "Plain answer {not a call}",
        [],
    )


def test_a_broken_call_is_kept_as_text() -> None:
    text = "<tool_call>\n{oops}\n</tool_call> after"
    assert run_tools("hermes", text, 3) == (text, [])
    unterminated = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "X"}}'
    content, calls = run_tools("hermes", unterminated, 5)  # EOS came before </tool_call>
    assert content == "" and [c.name for c in calls] == ["get_weather"]


def test_qwen3_coder_values_follow_the_schema() -> None:
    text = (
        "<tool_call><function=get_weather><parameter=city>\n42\n</parameter>"
        "<parameter=metric>\ntrue\n</parameter><parameter=extra>\n[1, 2]\n</parameter>"
        "</function></tool_call>"
    )
    (call,) = run_tools("qwen3_coder", text, 1000)[1]
    assert json.loads(call.arguments) == {"city": "42", "metric": True, "extra": [1, 2]}


@pytest.mark.parametrize("size", SIZES)
def test_reasoning_split(size: int) -> None:
    assert run_reasoning("<think>a < b</think>\n\nAnswer", size) == ("a < b", "Answer")
    assert run_reasoning("  <think>x</think>y", size) == ("x", "y")
    assert run_reasoning("no thinking here <think>", size) == ("", "no thinking here <think>")
    assert run_reasoning("opened by the template</think>Yes", size, inside=True) == (
        "opened by the template",
        "Yes",
    )
    assert run_reasoning("<think>cut short by max_tokens", size) == ("cut short by max_tokens", "")
    assert run_reasoning("[THINK]hm[/THINK]ok", size, name="mistral") == ("hm", "ok")


def test_parser_choice() -> None:
    assert resolve_tool_format(None, {"tool_parser": "qwen3_coder"}) is TOOL_FORMATS["qwen3_coder"]
    assert resolve_tool_format("auto", {"tool_parser": "json_tools"}) is TOOL_FORMATS["hermes"]
    # A format only mlx-lm parses is left to the worker's tokenizer.
    assert resolve_tool_format("auto", {"tool_parser": "longcat"}) is TOOL_FORMATS["tokenizer"]
    assert resolve_tool_format("kimi_k3", {}) is TOOL_FORMATS["tokenizer"]
    # Formats the gateway parses itself since mlx-lm named them.
    assert resolve_tool_format("auto", {"tool_parser": "kimi_k2"}) is TOOL_FORMATS["kimi_k2"]
    assert resolve_tool_format("minimax_m2", {}) is TOOL_FORMATS["minimax_m2"]
    assert resolve_tool_format("auto", {"tool_parser": "glm47"}) is TOOL_FORMATS["glm47"]
    assert resolve_tool_format("glm4_moe", {}) is TOOL_FORMATS["glm45"]
    assert resolve_tool_format("auto", {"tool_parser": "harmony"}) is TOOL_FORMATS["harmony"]
    assert resolve_tool_format("auto", {}) is TOOL_FORMATS["hermes"]
    assert resolve_tool_format("llama3", {}) is TOOL_FORMATS["llama3_json"]
    assert resolve_tool_format("none", {"tool_parser": "json_tools"}) is None
    # A worker that writes the fallback tool prompt asked for Hermes calls.
    fallback = {"tool_prompt": "fallback"}
    assert resolve_tool_format("qwen3_coder", fallback) is TOOL_FORMATS["hermes"]
    assert (
        resolve_tool_format("auto", {**fallback, "tool_parser": "kimi_k2"})
        is TOOL_FORMATS["hermes"]
    )
    assert resolve_tool_format("none", fallback) is None
    assert resolve_tool_format("auto", {"tool_prompt": "template"}) is TOOL_FORMATS["hermes"]
    think = {"think_start": "<think>", "think_end": "</think>"}
    assert resolve_reasoning(None, think) == REASONING_PARSERS["think"]
    assert resolve_reasoning("auto", {}) is None
    assert resolve_reasoning("qwen3", {}) == REASONING_PARSERS["think"]
    assert resolve_reasoning("none", think) is None
    assert resolve_reasoning("kimi_k2", {}) == REASONING_PARSERS["think"]
    harmony = {"reasoning_parser": "harmony"}
    assert resolve_reasoning("auto", harmony) == REASONING_PARSERS["harmony"]


def test_stop_scanner_and_markers() -> None:
    assert held_suffix("abc <too", ["<tool_call>"]) == 4
    assert held_suffix("abc", ["<tool_call>"]) == 0
    scanner = StopScanner(["END", "##"])
    out = "".join(scanner.feed(p) for p in pieces("one #two EN three END four", 2))
    assert (out, scanner.matched) == ("one #two EN three ", "END")
    scanner = StopScanner(["END"])
    assert scanner.feed("tail E") + scanner.finish() == "tail E"


def test_the_parser_table_names_exactly_the_engines_formats_and_markers() -> None:
    """The config validates parser names from the one table in protocol/ (it must not
    import the engine), and the engine parses with what a name stands for: every name
    leads to a format or markers the engine has, and each of those has a name."""
    from mlx_gateway.protocol.parsers import REASONING_PARSER_MARKERS, TOOL_PARSER_FORMATS

    assert set(TOOL_PARSER_FORMATS.values()) == set(TOOL_FORMATS)
    assert set(REASONING_PARSER_MARKERS.values()) == set(REASONING_PARSERS)
    for name in TOOL_FORMATS:
        assert TOOL_PARSER_FORMATS[name] == name
    for name in REASONING_PARSERS:
        assert REASONING_PARSER_MARKERS[name] == name


def run_cut(fmt: str, text: str, size: int) -> tuple[str, list[ParsedCall], bool]:
    """``text`` as an output the token limit ended: its parse, and whether a call was cut."""
    stream = ToolCallStream(TOOL_FORMATS[fmt], TOOLS)
    events = [e for piece in pieces(text, size) for e in stream.feed(piece)]
    events += stream.finish(cut=True)
    text_out = "".join(e for e in events if isinstance(e, str))
    return text_out, [e for e in events if isinstance(e, ParsedCall)], stream.cut_call


@pytest.mark.parametrize("size", [1, 3, 1000])
@pytest.mark.parametrize("fmt", list(CALLS))
def test_a_call_cut_by_the_token_limit_is_dropped(fmt: str, size: int) -> None:
    text, before = CALLS[fmt]
    opening = len(text) - len(text[len(before) :].lstrip())  # where the call begins
    for end in range(opening + 1, len(text)):
        content, calls, cut = run_cut(fmt, text[:end], size)
        where = f"{fmt} cut after {text[:end]!r}"
        assert calls == [], where
        assert content.strip() == before.strip(), where  # not a character of the call
        assert cut, where
    content, calls, cut = run_cut(fmt, text, size)  # the whole call came: not cut
    assert [c.name for c in calls] == ["get_weather"] and not cut


def test_complete_calls_stay_when_a_later_one_is_cut() -> None:
    one = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "A"}}\n</tool_call>'
    content, calls, cut = run_cut("hermes", one + "\n" + one[:30], 4)
    assert [json.loads(c.arguments) for c in calls] == [{"city": "A"}]
    assert content == "" and cut
    # A call needing no end marker counts when the limit came right after it.
    llama = '{"name": "get_weather", "parameters": {"city": "A"}}'
    content, calls, cut = run_cut("llama3_json", llama, 5)
    assert [c.name for c in calls] == ["get_weather"] and content == "" and not cut


def test_text_cut_by_the_token_limit_keeps_all_but_a_marker_start() -> None:
    assert run_cut("hermes", "Hello <tool_ca", 3) == ("Hello ", [], True)
    assert run_cut("hermes", "Hello <b>", 3) == ("Hello <b>", [], False)
    assert run_cut("hermes", "Hello <", 3) == ("Hello ", [], True)
    assert run_cut("hermes", 'Sure.\n\n<tool_call>\n{"na', 1) == ("Sure.", [], True)
    assert run_cut("llama3_json", "Plain answer {not", 3) == ("Plain answer {not", [], False)
    # A Llama 3 answer that is JSON but no call stays text when cut.
    assert run_cut("llama3_json", '{"answer": 42, "why": "bec', 3) == (
        '{"answer": 42, "why": "bec',
        [],
        False,
    )
    assert run_cut("llama3_json", ' { "name": "get_wea', 3) == ("", [], True)
    # Without the limit a broken or unfinished section is still the model's text.
    assert run_tools("hermes", "Hello <tool_ca", 3) == ("Hello <tool_ca", [])
    assert run_tools("hermes", '<tool_call>\n{"na', 3) == ('<tool_call>\n{"na', [])
