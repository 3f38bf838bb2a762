"""The Anthropic Messages API with the real app and a fake worker, through the official
``anthropic`` SDK in strict mode: blocks, tools, stop sequences, the stream's exact
event order, count_tokens, Anthropic-shaped errors and ``x-api-key``."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import httpx2
import pytest
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app

from ..fakes import fake_command, fake_config
from .lm_app import OK, PNG_1PX, REASONER, VISION, app, hermes_call, http
from .test_responses_api import sse_events

pytestmark = pytest.mark.slow
__all__ = ["app", "http"]  # fixtures

TOOL = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def client_for(app: Starlette, api_key: str = "unused") -> anthropic.AsyncAnthropic:
    http_client = httpx2.AsyncClient(transport=httpx2.ASGITransport(app), base_url="http://gw")
    return anthropic.AsyncAnthropic(
        base_url="http://gw",
        api_key=api_key,
        http_client=http_client,
        max_retries=0,
        _strict_response_validation=True,
    )


@pytest.fixture
def sdk(app: Starlette) -> anthropic.AsyncAnthropic:
    return client_for(app)


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


async def test_a_message(sdk: anthropic.AsyncAnthropic) -> None:
    message = await sdk.messages.create(
        model=OK,
        max_tokens=50,
        system=[{"type": "text", "text": "You are terse."}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "hello claude"}]}],
        metadata={"user_id": "u1"},
    )
    assert message.id.startswith("msg_")
    assert message.role == "assistant" and message.model == OK
    assert [b.type for b in message.content] == ["text"]
    assert message.content[0].text == "hello claude "  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert (message.usage.input_tokens, message.usage.output_tokens) == (2, 2)


async def test_stop_sequences_and_max_tokens(sdk: anthropic.AsyncAnthropic) -> None:
    message = await sdk.messages.create(
        model=OK, max_tokens=50, messages=user("say alpha beta STOP gamma"), stop_sequences=["STOP"]
    )
    assert message.content[0].text == "alpha beta "  # type: ignore[union-attr]
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", "STOP")

    capped = await sdk.messages.create(model=OK, max_tokens=2, messages=user("a b c d"))
    assert capped.stop_reason == "max_tokens"
    assert capped.content[0].text == "a b "  # type: ignore[union-attr]


async def test_the_stream_event_order(http: httpx.AsyncClient) -> None:
    text = "<think>hmm</think>Sure." + hermes_call("get_weather", '{"city": "Linz"}')
    body = {
        "model": REASONER,
        "max_tokens": 100,
        "messages": user(f"say {text}"),
        "tools": [TOOL],
        "stream": True,
    }
    r = await http.post("/v1/messages", json=body)
    assert r.status_code == 200
    events = sse_events(r.content)
    assert all(name == data["type"] for name, data in events)
    names = [name for name, _ in events if name != "content_block_delta"]
    assert names == [
        "message_start",
        "content_block_start",
        "content_block_stop",
        "content_block_start",
        "content_block_stop",
        "content_block_start",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert starts == ["thinking", "text", "tool_use"]
    deltas = [d["delta"] for n, d in events if n == "content_block_delta"]
    assert "".join(d.get("thinking", "") for d in deltas) == "hmm"
    assert "".join(d.get("text", "") for d in deltas) == "Sure."
    (partial,) = [d["partial_json"] for d in deltas if d["type"] == "input_json_delta"]
    assert json.loads(partial) == {"city": "Linz"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


async def test_stream_helper_and_the_agent_loop(sdk: anthropic.AsyncAnthropic) -> None:
    call = hermes_call("get_weather", '{"city": "Riga"}')
    async with sdk.messages.stream(
        model=REASONER,
        max_tokens=100,
        messages=user(f"say <think>plan</think>{call}"),
        tools=[TOOL],
    ) as stream:
        async for _ in stream:
            pass
        first = await stream.get_final_message()
    assert first.stop_reason == "tool_use"
    assert [b.type for b in first.content] == ["thinking", "tool_use"]
    tool_use = first.content[1]
    assert tool_use.type == "tool_use" and tool_use.id.startswith("toolu_")
    assert (tool_use.name, tool_use.input) == ("get_weather", {"city": "Riga"})

    # The fake model answers "roles" with the roles of the conversation it got.
    second = await sdk.messages.create(
        model=REASONER,
        max_tokens=100,
        system="Use tools.",
        tools=[TOOL],
        messages=[
            {"role": "user", "content": "weather in Riga?"},
            {"role": "assistant", "content": first.content},  # type: ignore[typeddict-item]
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": tool_use.id, "content": "roles"}
                ],
            },
        ],
    )
    assert second.content[0].text == "system user assistant tool "  # type: ignore[union-attr]
    assert second.stop_reason == "end_turn"


async def test_forced_tool_choice(sdk: anthropic.AsyncAnthropic) -> None:
    message = await sdk.messages.create(
        model=OK,
        max_tokens=100,
        messages=user("say " + hermes_call("get_weather", '{"city": "Oulu"}')),
        tools=[TOOL],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    )
    (block,) = message.content
    assert block.type == "tool_use" and block.input == {"city": "Oulu"}


async def test_count_tokens(sdk: anthropic.AsyncAnthropic) -> None:
    count = await sdk.messages.count_tokens(
        model=OK, system="one two", messages=user("three four five")
    )
    assert count.input_tokens == 5  # the fake counts the words of every message


async def test_errors_are_anthropic_shaped(
    sdk: anthropic.AsyncAnthropic, http: httpx.AsyncClient
) -> None:
    r = await http.post("/v1/messages", json={"model": OK, "messages": user("hi")})
    assert r.status_code == 400
    body = r.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]

    with pytest.raises(anthropic.NotFoundError) as info:
        await sdk.messages.create(model="claude-opus-4", max_tokens=5, messages=user("hi"))
    assert info.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]

    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
    }
    with pytest.raises(anthropic.BadRequestError) as bad:
        await sdk.messages.create(
            model=OK, max_tokens=5, messages=[{"role": "user", "content": [image]}]
        )
    assert "does not accept images" in str(bad.value)

    unsupported = {"type": "container_upload", "file_id": "file_1"}  # documents are read now
    r = await http.post(
        "/v1/messages",
        json={
            "model": OK,
            "max_tokens": 5,
            "messages": [{"role": "user", "content": [unsupported]}],
        },
    )
    assert r.status_code == 400 and "messages[0].content" in r.json()["error"]["message"]


@pytest.fixture
async def keyed_app() -> AsyncIterator[Starlette]:
    app = create_app(fake_config({"model_path": OK}, api_keys=["sk-local"]), command=fake_command)
    async with app.router.lifespan_context(app):
        yield app


async def test_x_api_key(keyed_app: Starlette) -> None:
    good = client_for(keyed_app, "sk-local")
    message = await good.messages.create(model=OK, max_tokens=5, messages=user("hi there"))
    assert message.content[0].text == "hi there "  # type: ignore[union-attr]
    with pytest.raises(anthropic.AuthenticationError):
        await client_for(keyed_app, "sk-wrong").messages.create(
            model=OK, max_tokens=5, messages=user("hi")
        )


async def test_image_blocks_reach_a_vision_model(sdk: anthropic.AsyncAnthropic) -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG_1PX},
    }
    message = await sdk.messages.create(
        model=VISION,
        max_tokens=20,
        messages=[{"role": "user", "content": [image, {"type": "text", "text": "say a pixel"}]}],
    )
    assert message.content[0].text == "a pixel"  # type: ignore[union-attr]


MID_SYSTEM_BETA = "mid-conversation-system-2026-04-07"
BETAS = {"anthropic-beta": f"claude-code-20250219,{MID_SYSTEM_BETA},effort-2025-11-24"}


def with_system_message(last: str) -> list[Any]:
    return [
        {"role": "user", "content": "hi there"},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": last},
    ]


async def test_system_messages_with_any_beta_or_none(http: httpx.AsyncClient) -> None:
    """A system message inside ``messages`` stays in place whatever beta comes with
    it: none, the one Claude Code declared up to 2.1.2xx, or the one it declares now."""
    body = {"model": OK, "max_tokens": 20, "messages": with_system_message("roles")}
    tool_changes = {"anthropic-beta": "mid-conversation-tool-changes-2026-07-01"}
    for headers in ({}, BETAS, tool_changes):
        r = await http.post("/v1/messages", json=body, headers=headers)
        assert r.status_code == 200, (headers, r.text)
        assert r.json()["content"][0]["text"] == "user system user "
    r = await http.post("/v1/messages", json={**body, "system": "Top."})
    assert r.json()["content"][0]["text"] == "system user system user "
    body.pop("max_tokens")
    counted = await http.post("/v1/messages/count_tokens", json=body)
    assert counted.status_code == 200 and counted.json() == {"input_tokens": 5}


async def test_a_system_message_holds_only_text(http: httpx.AsyncClient) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}
    messages = [{"role": "user", "content": "hi"}, {"role": "system", "content": [image]}]
    body = {"model": OK, "max_tokens": 5, "messages": messages}
    r = await http.post("/v1/messages", json=body, headers=BETAS)
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert "only text blocks, not 'image'" in message and "messages[1].content" in message


async def test_what_claude_code_sends(sdk: anthropic.AsyncAnthropic) -> None:
    """The fields and blocks Claude Code 2.1 sends (recorded from the real client):
    cache_control on blocks, adaptive thinking, context_management, output_config, a
    JSON metadata user_id, and a system message last in ``messages``."""
    cached = {"type": "ephemeral"}
    async with sdk.messages.stream(
        model=OK,
        max_tokens=32000,
        system=[
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.197;"},
            {"type": "text", "text": "You are a Claude agent.", "cache_control": cached},
        ],
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "<system-reminder>today</system-reminder>"},
                    {"type": "text", "text": "hello", "cache_control": cached},
                ],
            },
            {"role": "system", "content": "roles"},  # type: ignore[typeddict-item]
        ],
        tools=[{**TOOL, "cache_control": cached}],  # type: ignore[list-item]
        thinking={"type": "adaptive"},  # type: ignore[typeddict-item]
        metadata={"user_id": json.dumps({"device_id": "d", "session_id": "s"})},
        extra_headers=BETAS,
        extra_body={
            "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
            "output_config": {"effort": "high"},
        },
    ) as stream:
        message = await stream.get_final_message()
    assert message.content[0].text == "system user system "  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"

    # Its next turn (recorded after an answer with thinking and three parallel calls):
    # the system message stays where it was, results come back in any order, one as
    # an error and one with cache_control.
    def result(call_id: str, text: str, **extra: Any) -> dict[str, Any]:
        return {"type": "tool_result", "tool_use_id": call_id, "content": text, **extra}

    def call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}

    reply = await sdk.messages.create(
        model=OK,
        max_tokens=100,
        system="You are a Claude agent.",
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Look at hello.txt"}]},
            {"role": "system", "content": "Available agent types: …"},  # type: ignore[typeddict-item]
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Let me look.", "signature": "sig"},
                    call("toolu_1", "Read", {"file_path": "hello.txt"}),
                    call("toolu_2", "Bash", {"command": "echo hi"}),
                    call("toolu_3", "Glob", {"pattern": "*.txt"}),
                ],
            },
            {
                "role": "user",
                "content": [
                    result(
                        "toolu_3", "<tool_use_error>No such tool</tool_use_error>", is_error=True
                    ),
                    result("toolu_1", "1\thello"),
                    result("toolu_2", "roles", is_error=False, cache_control=cached),
                ],
            },
        ],  # type: ignore[list-item]
        tools=[TOOL],
        extra_headers=BETAS,
    )
    text = reply.content[0].text  # type: ignore[union-attr]
    assert text == "system user system assistant tool tool tool "


CLAUDE_CODE_RETRY = re.compile(
    r"input length and `max_tokens` exceed context limit: (\d+) \+ (\d+) > (\d+)"
)
"""What Claude Code matches to retry with a ``max_tokens`` that fits (2.1.197)."""


async def test_context_overflow_in_anthropic_words(
    sdk: anthropic.AsyncAnthropic, http: httpx.AsyncClient
) -> None:
    with pytest.raises(anthropic.BadRequestError) as err:
        await sdk.messages.create(model=OK, max_tokens=200, messages=user("overflow 100 a b"))
    error = err.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    assert error["message"] == (
        "input length and `max_tokens` exceed context limit: 4 + 200 > 100, "
        "decrease input length or `max_tokens` and try again"
    )
    match = CLAUDE_CODE_RETRY.search(error["message"])
    assert match is not None and match.groups() == ("4", "200", "100")

    with pytest.raises(anthropic.BadRequestError) as err:
        await sdk.messages.create(model=OK, max_tokens=5, messages=user("overflow 3 a b c"))
    assert err.value.body["error"]["message"] == "prompt is too long: 5 tokens > 3 maximum"  # type: ignore[index]

    # A stream that fails before it starts is a plain 400 too.
    body = {"model": OK, "max_tokens": 200, "messages": user("overflow 100 a b"), "stream": True}
    r = await http.post("/v1/messages", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["message"].startswith("input length and `max_tokens` exceed")

    # The OpenAI API keeps its own words and code.
    chat = {"model": OK, "max_tokens": 200, "messages": user("overflow 100 a b")}
    r = await http.post("/v1/chat/completions", json=chat)
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "context_length_exceeded"
    assert r.json()["error"]["message"].startswith("This model's maximum context length")
