"""The tool-call formats of GLM-4.5/4.6/4.7, MiniMax-M2, Kimi-K2, Gemma 3
(```` ```tool_code ````) and gpt-oss (harmony channels): samples written as each
model's chat template renders a call, fed whole and in pieces of every size; and
the grammars of forced calls, run by llguidance over bytes: the model's own text
for a call passes, a value outside the schema (an ``enum``, a ``maxLength``) does not."""

from __future__ import annotations

import json
from typing import Any

import llguidance
import pytest

from mlx_gateway.supervisor.engine.parsers.formats import TOOL_FORMATS
from mlx_gateway.supervisor.engine.parsers.harmony import HarmonySplitter
from mlx_gateway.supervisor.engine.parsers.tool_calls import Function, ParsedCall, ToolCallStream

WEATHER = Function(
    "get_weather",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "days": {"type": "integer"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
    },
)
TIME = Function("get_time", {"type": "object", "properties": {"zone": {"type": "string"}}})
TOOLS = [WEATHER, TIME]

SIZES = [1, 2, 3, 7, 1000]

# What each model writes for get_weather(city="Paris", days=3), after its prose.
SAMPLES: dict[str, tuple[str, str]] = {
    "glm45": (
        "I'll look that up.\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
        "<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n"
        "</tool_call>",
        "I'll look that up.",
    ),
    "glm47": (
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
        "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call>",
        "",
    ),
    "minimax_m2": (
        'Let me check.\n<minimax:tool_call>\n<invoke name="get_weather">\n'
        '<parameter name="city">Paris</parameter>\n<parameter name="days">3</parameter>\n'
        "</invoke>\n</minimax:tool_call>",
        "Let me check.",
    ),
    "kimi_k2": (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris", "days": 3}<|tool_call_end|>'
        "<|tool_calls_section_end|>",
        "",
    ),
    "gemma3": (
        'I will check the weather for you.\n\n```tool_code\nget_weather(city="Paris", days=3)\n```',
        "I will check the weather for you.",
    ),
}


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def run(fmt: str, text: str, size: int, cut: bool = False) -> tuple[str, list[ParsedCall], bool]:
    stream = ToolCallStream(TOOL_FORMATS[fmt], TOOLS)
    events = [e for piece in pieces(text, size) for e in stream.feed(piece)]
    events += stream.finish(cut=cut)
    content = "".join(e for e in events if isinstance(e, str))
    return content, [e for e in events if isinstance(e, ParsedCall)], stream.cut_call


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("fmt", list(SAMPLES))
def test_each_format_parses_in_any_pieces(fmt: str, size: int) -> None:
    text, before = SAMPLES[fmt]
    content, calls, cut = run(fmt, text, size)
    assert content.strip() == before and not cut
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris", "days": 3})
    ]


@pytest.mark.parametrize("fmt", list(SAMPLES))
def test_a_call_cut_by_the_token_limit_is_dropped(fmt: str) -> None:
    text, before = SAMPLES[fmt]
    opening = len(text) - len(text[len(before) :].lstrip())
    for end in range(opening + 1, len(text)):
        content, calls, cut = run(fmt, text[:end], 3, cut=True)
        assert (content.strip(), calls, cut) == (before, [], True), text[:end]


def test_several_calls_in_one_section_or_one_after_another() -> None:
    minimax = (
        '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Oslo'
        '</parameter>\n</invoke>\n<invoke name="get_time">\n<parameter name="zone">CET'
        "</parameter>\n</invoke>\n</minimax:tool_call>"
    )
    kimi = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Oslo"}<|tool_call_end|><|tool_call_begin|>'
        'functions.get_time:1<|tool_call_argument_begin|>{"zone": "CET"}<|tool_call_end|>'
        "<|tool_calls_section_end|>"
    )
    glm = (
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n"
        "</tool_call>\n<tool_call>get_time\n<arg_key>zone</arg_key>\n<arg_value>CET</arg_value>\n"
        "</tool_call>"
    )
    gemma3 = '```tool_code\nget_weather(city="Oslo")\nprint(get_time(zone="CET"))\n```'
    cases = [("minimax_m2", minimax), ("kimi_k2", kimi), ("glm45", glm), ("gemma3", gemma3)]
    for fmt, text in cases:
        for size in (2, 1000):
            content, calls, _ = run(fmt, text, size)
            assert content == "", fmt
            assert [(c.name, json.loads(c.arguments)) for c in calls] == [
                ("get_weather", {"city": "Oslo"}),
                ("get_time", {"zone": "CET"}),
            ], fmt


def test_values_follow_the_schema() -> None:
    # A string parameter stays text even when it reads as a number; others are JSON.
    glm = (
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>1984</arg_value>"
        "<arg_key>days</arg_key><arg_value>2</arg_value><arg_key>extra</arg_key>"
        '<arg_value>{"a": [1, true]}</arg_value></tool_call>'
    )
    (call,) = run("glm47", glm, 1000)[1]
    assert json.loads(call.arguments) == {"city": "1984", "days": 2, "extra": {"a": [1, True]}}
    minimax = (
        "<minimax:tool_call><invoke name=get_weather><parameter name=city>\n007\n</parameter>"
        "<parameter name=days>4</parameter></invoke></minimax:tool_call>"
    )
    (call,) = run("minimax_m2", minimax, 1000)[1]
    assert json.loads(call.arguments) == {"city": "007", "days": 4}
    gemma3 = "```tool_code\nget_weather(city='Rome', days=1, metric=true)\n```"
    (call,) = run("gemma3", gemma3, 1000)[1]
    assert json.loads(call.arguments) == {"city": "Rome", "days": 1, "metric": True}


def test_text_that_is_no_call_stays_text() -> None:
    assert run("gemma3", "```python\nprint(1)\n```", 3)[:2] == ("```python\nprint(1)\n```", [])
    broken = "```tool_code\nimport os\n```"
    assert run("gemma3", broken, 3)[:2] == (broken, [])
    junk = "<minimax:tool_call>nothing here</minimax:tool_call> ok"
    assert run("minimax_m2", junk, 4)[:2] == (junk, [])
    bad = "<|tool_calls_section_begin|>oops<|tool_calls_section_end|>"
    assert run("kimi_k2", bad, 4)[:2] == (bad, [])


# ---------------------------------------------------------------- harmony (gpt-oss)


def harmony(text: str, size: int, cut: bool = False) -> tuple[str, str, list[ParsedCall], bool]:
    """``text`` through the harmony splitter and then the harmony tool-call stream."""
    splitter = HarmonySplitter()
    stream = ToolCallStream(TOOL_FORMATS["harmony"], TOOLS)
    reasoning, events = "", []
    split = [p for piece in pieces(text, size) for p in splitter.feed(piece)] + splitter.finish()
    for kind, part in split:
        if kind == "reasoning":
            reasoning += part
        else:
            events += stream.feed(part)
    events += stream.finish(cut=cut)
    content = "".join(e for e in events if isinstance(e, str))
    return reasoning, content, [e for e in events if isinstance(e, ParsedCall)], stream.cut_call


ANALYSIS = "<|channel|>analysis<|message|>User asks weather in Paris. Use get_weather.<|end|>"
CALL_AFTER = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city":"Paris","days":3}'
)
CALL_BEFORE = (  # the recipient may come in the header before the channel
    "<|start|>assistant to=functions.get_weather<|channel|>commentary json"
    '<|message|>{"city": "Paris", "days": 3}'
)


@pytest.mark.parametrize("size", SIZES)
def test_harmony_channels(size: int) -> None:
    final = "<|start|>assistant<|channel|>final<|message|>It is sunny in Paris, 24 °C."
    assert harmony(ANALYSIS + final, size) == (
        "User asks weather in Paris. Use get_weather.",
        "It is sunny in Paris, 24 °C.",
        [],
        False,
    )
    # <|return|> ends the output; when its text comes, nothing of it shows.
    assert harmony(ANALYSIS + final + "<|return|>", size)[1] == "It is sunny in Paris, 24 °C."
    for call in (CALL_AFTER, CALL_BEFORE, CALL_AFTER + "<|call|>"):
        reasoning, content, calls, cut = harmony(ANALYSIS + call, size)
        assert reasoning == "User asks weather in Paris. Use get_weather."
        assert content == "" and not cut
        assert [(c.name, json.loads(c.arguments)) for c in calls] == [
            ("get_weather", {"city": "Paris", "days": 3})
        ]
    # A preamble on the commentary channel is for the user.
    preamble = "<|start|>assistant<|channel|>commentary<|message|>Checking the forecast.<|end|>"
    reasoning, content, calls, _ = harmony(ANALYSIS + preamble + CALL_AFTER, size)
    assert content == "Checking the forecast." and [c.name for c in calls] == ["get_weather"]
    # Output that is not harmony at all passes as content.
    plain = "Just text, <b>no</b> channels."
    assert harmony(plain, size)[:2] == ("", plain)


def test_harmony_cut_by_the_token_limit() -> None:
    text = ANALYSIS + CALL_AFTER
    start = len(ANALYSIS)
    for end in range(start + 1, len(text)):
        _, content, calls, _ = harmony(text[:end], 4, cut=True)
        assert content == "" and calls == [], text[:end]
    # Cut while still thinking: all of it is reasoning.
    assert harmony(ANALYSIS[:40], 3, cut=True)[:3] == ("User asks ", "", [])


# ---------------------------------------------------------------- forced-call grammars

BYTES = llguidance.LLTokenizer("byte")

FORCED = {
    "function_gemma": "<start_function_call>call:get_weather{city:<escape>Paris<escape>,"
    "unit:<escape>celsius<escape>}<end_function_call>",
    "gemma4": '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,'
    'unit:<|"|>celsius<|"|>}<tool_call|>',
    "glm45": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
    "<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n</tool_call>",
    "glm47": "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
    "<arg_key>unit</arg_key><arg_value>celsius</arg_value></tool_call>",
    "minimax_m2": '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">'
    'Paris</parameter>\n<parameter name="unit">celsius</parameter>\n</invoke>\n'
    "</minimax:tool_call>",
    "kimi_k2": "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
    '<|tool_call_argument_begin|>{"city": "Paris", "unit": "celsius"}<|tool_call_end|>'
    "<|tool_calls_section_end|>",
    "gemma3": '```tool_code\nget_weather(city="Paris", unit="celsius")\n```',
    "pythonic": '<|tool_call_start|>[get_weather(city="Paris", unit="celsius")]<|tool_call_end|>',
    "harmony": "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"city": "Paris", "unit": "celsius"}',
    "qwen3_coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
    "<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>",
}


def accepts(grammar: str, text: str) -> bool:
    compiled = llguidance.LLMatcher.grammar_from_lark(grammar)
    matcher = llguidance.LLMatcher(BYTES, compiled, log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    return matcher.consume_tokens(BYTES.tokenize_str(text)) and matcher.is_accepting()


@pytest.mark.parametrize("fmt", list(FORCED))
def test_forced_call_grammar(fmt: str) -> None:
    grammar = TOOL_FORMATS[fmt].grammar([WEATHER], False)
    assert grammar is not None
    text = FORCED[fmt]
    assert accepts(grammar, text)
    assert not accepts(grammar, text.replace("celsius", "kelvin"))  # the enum holds
    assert not accepts(grammar, text.replace("Paris", "Parisianville-sur-Mer"))  # maxLength
    # And what the grammar lets through parses as the call.
    calls = harmony(text, 5)[2] if fmt == "harmony" else run(fmt, text, 5)[1]
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris", "unit": "celsius"})
    ]


def test_a_gemma_enum_without_a_type_is_forced_too() -> None:
    tool = Function(
        "set_unit",
        {
            "type": "object",
            "properties": {"unit": {"enum": ["C", "F"]}, "level": {"enum": [1, 2]}},
            "required": ["unit", "level"],
        },
    )
    grammar = TOOL_FORMATS["gemma4"].grammar([tool], False)
    call: dict[str, Any] = {"C": True, "F": True, "K": False}
    for unit, ok in call.items():
        text = f'<|tool_call>call:set_unit{{unit:<|"|>{unit}<|"|>,level:2}}<tool_call|>'
        assert accepts(grammar, text) is ok
    assert not accepts(grammar, '<|tool_call>call:set_unit{unit:<|"|>C<|"|>,level:3}<tool_call|>')
