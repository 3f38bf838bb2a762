"""Chat completions, complete: n choices, tools, thinking, structured-output parsing,
checks — the real app and a fake worker, through the openai SDK in strict mode."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from .lm_app import (
    MLX_PARSED,
    OK,
    PLAIN,
    REASONER,
    WEATHER_TOOL,
    XML,
    app,
    hermes_call,
    http,
    say,
    sdk,
)
from .test_handlers import events

pytestmark = pytest.mark.slow
__all__ = ["app", "http", "sdk"]  # fixtures


async def test_n_choices(sdk: openai.AsyncOpenAI) -> None:
    reply = await sdk.chat.completions.create(
        model=OK, messages=[{"role": "user", "content": "one two"}], n=3, seed=7
    )
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert all(c.message.content == "one two " for c in reply.choices)
    assert reply.usage is not None
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (2, 6)

    stream = await sdk.chat.completions.create(
        model=OK,
        messages=[{"role": "user", "content": "a b c"}],
        n=2,
        stream=True,
        stream_options={"include_usage": True},
    )
    texts = {0: "", 1: ""}
    finishes = {}
    async for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason:
                finishes[choice.index] = choice.finish_reason
    assert texts == {0: "a b c ", 1: "a b c "}
    assert finishes == {0: "stop", 1: "stop"}
    assert chunk.usage is not None and chunk.usage.completion_tokens == 6


async def test_n_choices_when_the_worker_crashes(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        await sdk.chat.completions.create(
            model=OK, messages=[{"role": "user", "content": "crash a b c d"}], n=2
        )
    assert info.value.status_code == 503
    again = await sdk.chat.completions.create(
        model=OK, messages=[{"role": "user", "content": "fine again"}], n=2
    )
    assert [c.message.content for c in again.choices] == ["fine again "] * 2


async def test_forced_tool_call_is_parsed(sdk: openai.AsyncOpenAI) -> None:
    call = hermes_call("get_weather", '{"city": "Paris", "days": 2}')
    reply = await sdk.chat.completions.create(
        model=OK, messages=say(call), tools=[WEATHER_TOOL], tool_choice="required"
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (tool_call,) = choice.message.tool_calls or []
    assert tool_call.type == "function"
    assert tool_call.id.startswith("call_")
    assert tool_call.function.name == "get_weather"
    assert json.loads(tool_call.function.arguments) == {"city": "Paris", "days": 2}


async def test_text_around_calls_and_parallel_calls(sdk: openai.AsyncOpenAI) -> None:
    text = "Checking. " + hermes_call("get_weather", '{"city": "Oslo"}') + "\n"
    text += hermes_call("get_weather", '{"city": "Rome"}')
    reply = await sdk.chat.completions.create(model=OK, messages=say(text), tools=[WEATHER_TOOL])
    message = reply.choices[0].message
    assert message.content == "Checking. "
    assert [json.loads(c.function.arguments)["city"] for c in message.tool_calls or []] == [
        "Oslo",
        "Rome",
    ]
    assert len({c.id for c in message.tool_calls or []}) == 2

    single = await sdk.chat.completions.create(
        model=OK, messages=say(text), tools=[WEATHER_TOOL], parallel_tool_calls=False
    )
    assert len(single.choices[0].message.tool_calls or []) == 1

    none = await sdk.chat.completions.create(
        model=OK, messages=say(text), tools=[WEATHER_TOOL], tool_choice="none"
    )
    assert none.choices[0].message.tool_calls is None
    assert none.choices[0].message.content == text
    assert none.choices[0].finish_reason == "stop"


async def test_qwen3_coder_xml_calls(sdk: openai.AsyncOpenAI) -> None:
    xml = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nSão Paulo\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>"
    )
    reply = await sdk.chat.completions.create(model=XML, messages=say(xml), tools=[WEATHER_TOOL])
    (call,) = reply.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == {"city": "São Paulo", "days": 3}


async def test_calls_parsed_by_the_workers_tokenizer(sdk: openai.AsyncOpenAI) -> None:
    # The worker reports a format only mlx-lm parses: the gateway asks the worker to
    # parse calls (parse_tools) and relays the calls it gets.
    text = "Done." + hermes_call("get_weather", '{"city": "Pisa"}')
    reply = await sdk.chat.completions.create(
        model=MLX_PARSED, messages=say(text), tools=[WEATHER_TOOL]
    )
    message = reply.choices[0].message
    assert (message.content, reply.choices[0].finish_reason) == ("Done.", "tool_calls")
    (call,) = message.tool_calls or []
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "get_weather",
        {"city": "Pisa"},
    )
    plain = await sdk.chat.completions.create(model=MLX_PARSED, messages=say(text))
    assert plain.choices[0].message.content == text  # no tools: nothing parsed


async def test_a_call_that_does_not_parse_stays_text(sdk: openai.AsyncOpenAI) -> None:
    broken = "<tool_call>\n{not json}\n</tool_call>"
    reply = await sdk.chat.completions.create(model=OK, messages=say(broken), tools=[WEATHER_TOOL])
    assert reply.choices[0].message.content == broken
    assert reply.choices[0].finish_reason == "stop"


async def test_streamed_tool_call_accumulates_in_the_sdk_helper(sdk: openai.AsyncOpenAI) -> None:
    text = "<think>which city?</think>" + hermes_call("get_weather", '{"city": "Lyon"}')
    async with sdk.chat.completions.stream(
        model=OK, messages=say(text), tools=[WEATHER_TOOL]
    ) as stream:
        async for _ in stream:
            pass
        final = await stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Lyon"}
    assert not choice.message.content


async def test_streamed_call_deltas_name_the_call_once(http: httpx.AsyncClient) -> None:
    body = {
        "model": OK,
        "messages": say(hermes_call("get_weather", '{"city": "Nice"}')),
        "tools": [WEATHER_TOOL],
        "stream": True,
    }
    data = events((await http.post("/v1/chat/completions", json=body)).content)
    assert data[-1] == "[DONE]"
    deltas = [d["choices"][0]["delta"] for d in data[:-1]]
    parts = [p for d in deltas for p in d.get("tool_calls", [])]
    assert [p["index"] for p in parts] == [0, 0]
    assert parts[0]["id"].startswith("call_") and parts[0]["function"]["name"] == "get_weather"
    assert "id" not in parts[1] and "name" not in parts[1]["function"]
    assert json.loads(parts[1]["function"]["arguments"]) == {"city": "Nice"}
    assert data[-2]["choices"][0]["finish_reason"] == "tool_calls"


async def test_reasoning_is_split(sdk: openai.AsyncOpenAI, http: httpx.AsyncClient) -> None:
    reply = await sdk.chat.completions.create(
        model=REASONER, messages=say("<think>\nLet me count.\n</think>\n\nThree.")
    )
    message: Any = reply.choices[0].message
    assert message.content == "Three."
    assert message.reasoning_content == "\nLet me count.\n"

    body = {"model": REASONER, "messages": say("<think>hm, ok</think>Yes."), "stream": True}
    data = events((await http.post("/v1/chat/completions", json=body)).content)
    deltas = [d["choices"][0]["delta"] for d in data[:-1]]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "hm, ok"
    assert "".join(d.get("content", "") for d in deltas) == "Yes."


async def test_thinking_opened_by_the_template(sdk: openai.AsyncOpenAI) -> None:
    reply = await sdk.chat.completions.create(
        model=REASONER,
        messages=say("still pondering</think>Answer."),
        extra_body={"chat_template_kwargs": {"enable_thinking": True}},
    )
    message: Any = reply.choices[0].message
    assert (message.reasoning_content, message.content) == ("still pondering", "Answer.")

    # Without a reasoning parser the thinking stays in the text.
    plain = await sdk.chat.completions.create(model=PLAIN, messages=say("<think>x</think>y"))
    assert plain.choices[0].message.content == "<think>x</think>y"


async def test_reasoning_effort_reaches_the_template(sdk: openai.AsyncOpenAI) -> None:
    # The fake says a thinking block was opened when enable_thinking is true.
    reply = await sdk.chat.completions.create(
        model=REASONER, messages=say("a</think>b"), reasoning_effort="high"
    )
    assert reply.choices[0].message.content == "b"
    off = await sdk.chat.completions.create(
        model=REASONER, messages=say("a</think>b"), reasoning_effort="none"
    )
    assert off.choices[0].message.content == "a</think>b"


class Weather(BaseModel):
    city: str
    celsius: int


async def test_parse_with_a_pydantic_model(sdk: openai.AsyncOpenAI) -> None:
    completion = await sdk.chat.completions.parse(
        model=OK, messages=say('{"city": "Bern", "celsius": 21}'), response_format=Weather
    )
    assert completion.choices[0].message.parsed == Weather(city="Bern", celsius=21)


async def test_agent_loop(sdk: openai.AsyncOpenAI) -> None:
    first = await sdk.chat.completions.create(
        model=OK,
        messages=say(hermes_call("get_weather", '{"city": "Kyiv"}')),
        tools=[WEATHER_TOOL],
    )
    call = (first.choices[0].message.tool_calls or [])[0]
    second = await sdk.chat.completions.create(
        model=OK,
        tools=[WEATHER_TOOL],
        messages=[
            {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
            {"role": "user", "content": "weather in Kyiv?"},
            first.choices[0].message.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"role": "tool", "tool_call_id": call.id, "content": "sunny and warm"},
        ],
        user="someone",
        metadata={"session": "1"},
        store=False,
    )
    assert second.choices[0].message.content == "sunny and warm "
    assert second.choices[0].finish_reason == "stop"


NAMED_X = {"type": "function", "function": {"name": "x"}}
BAD_NAME_TOOL = {"type": "function", "function": {"name": "bad name"}}


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"n": 17}, "n"),
        ({"n": 0}, "n"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"temperature": 2.5}, "temperature"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"tools": [WEATHER_TOOL], "tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": [WEATHER_TOOL], "tool_choice": NAMED_X}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [BAD_NAME_TOOL]}, "tools[0].function.name"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        ({"response_format": {"type": "xml"}}, "response_format.type"),
    ],
)
async def test_bad_values_are_400_naming_the_field(
    http: httpx.AsyncClient, extra: dict[str, Any], param: str
) -> None:
    body = {"model": OK, "messages": [{"role": "user", "content": "hi"}], **extra}
    r = await http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


async def test_unknown_and_ignored_fields_are_accepted(http: httpx.AsyncClient) -> None:
    body = {
        "model": OK,
        "messages": [{"role": "user", "content": "fine"}],
        "user": "u1",
        "metadata": {"k": "v"},
        "store": True,
        "service_tier": "auto",
        "logit_bias": {"50256": -100},
        "prediction": {"type": "content", "content": "x"},
        "modalities": ["text"],
        "some_future_field": {"nested": [1, 2]},
    }
    r = await http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "fine "
