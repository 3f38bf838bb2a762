"""The Responses API with the real app and a fake worker, through the openai SDK in
strict mode: output items, the stream's event grammar, function tools, the store."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from mlx_gateway.supervisor.api.responses import tools as responses_tools
from mlx_gateway.supervisor.api.responses.convert import to_chat
from mlx_gateway.supervisor.api.responses.schemas import input_items
from mlx_gateway.supervisor.http.response_store import ResponseStore

from .lm_app import OK, PNG_1PX, REASONER, VISION, WEATHER_TOOL, app, hermes_call, http, sdk

pytestmark = pytest.mark.slow
__all__ = ["app", "http", "sdk"]  # fixtures

TOOL = {"type": "function", **WEATHER_TOOL["function"]}
BONN = '{"city": "Bonn"}'


# ------------------------------------------------------ namespaces, hosted tools

SPAWN = {
    "type": "function",
    "name": "spawn",
    "description": "Start a sub-agent.",
    "strict": False,
    "parameters": {"type": "object", "properties": {"task": {"type": "string"}}},
}
WAIT = {**SPAWN, "name": "wait", "description": "Wait for a sub-agent."}
NAMESPACE = {
    "type": "namespace",
    "name": "agents",
    "description": "Tools for sub-agents.",
    "tools": [SPAWN, WAIT],
}
"""A namespace tool as Codex CLI sends one (``multi_agent_v1`` there)."""
HOSTED = [
    {"type": "file_search", "vector_store_ids": ["vs_1"]},
    {"type": "code_interpreter", "container": {"type": "auto"}},
    {"type": "image_generation"},
]
"""Hosted tools the gateway does not run (web_search and mcp it runs: test_server_tools.py,
test_mcp_tools.py)."""
SPAWN_CALL = hermes_call("agents__spawn", '{"task": "tests"}')


def sse_events(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in body.decode().split("\n\n")[:-1]:
        name, data = block.split("\n", 1)
        assert name.startswith("event: ") and data.startswith("data: "), block
        out.append((name[len("event: ") :], json.loads(data[len("data: ") :])))
    return out


async def test_text_input_and_the_store(sdk: openai.AsyncOpenAI) -> None:
    response = await sdk.responses.create(
        model=OK, input="hello responses", instructions="Be nice."
    )
    assert response.status == "completed"
    assert response.output_text == "hello responses "
    assert response.instructions == "Be nice."
    assert response.usage is not None and response.usage.output_tokens == 2
    (item,) = response.output
    assert item.type == "message" and item.id.startswith("msg_")

    fetched = await sdk.responses.retrieve(response.id)
    assert fetched.output_text == "hello responses "
    items = await sdk.responses.input_items.list(response.id)
    assert [i.type for i in items.data] == ["message"]

    await sdk.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        await sdk.responses.retrieve(response.id)

    unstored = await sdk.responses.create(model=OK, input="x", store=False)
    with pytest.raises(openai.NotFoundError):
        await sdk.responses.retrieve(unstored.id)
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.responses.create(model=OK, input="y", previous_response_id=unstored.id)
    assert info.value.body["param"] == "previous_response_id"  # type: ignore[index]


async def test_the_stream_event_grammar(http: httpx.AsyncClient) -> None:
    text = "<think>plan it</think>Calling now." + hermes_call("get_weather", '{"city": "Graz"}')
    body = {"model": REASONER, "input": f"say {text}", "tools": [TOOL], "stream": True}
    events = sse_events((await http.post("/v1/responses", json=body)).content)
    assert [e["sequence_number"] for _, e in events] == list(range(len(events)))
    assert all(name == e["type"] for name, e in events)
    kinds = [name.removeprefix("response.") for name, _ in events]
    assert kinds[:2] == ["created", "in_progress"]
    assert kinds[-1] == "completed"
    body_kinds = [k for k in kinds[2:-1] if not k.endswith(".delta")]
    assert body_kinds == [
        "output_item.added",
        "content_part.added",
        "reasoning_text.done",
        "content_part.done",
        "output_item.done",
        "output_item.added",
        "content_part.added",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "output_item.added",
        "function_call_arguments.done",
        "output_item.done",
    ]
    final = events[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == ["reasoning", "message", "function_call"]
    assert final["output"][0]["content"][0]["text"] == "plan it"
    assert final["output"][1]["content"][0]["text"] == "Calling now."
    assert json.loads(final["output"][2]["arguments"]) == {"city": "Graz"}


async def test_stream_helper_accumulates(sdk: openai.AsyncOpenAI) -> None:
    async with sdk.responses.stream(model=OK, input="say stream me please") as stream:
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(deltas) == "stream me please"
    assert final.output_text == "stream me please"

    events = [e async for e in await sdk.responses.create(model=OK, input="a b", stream=True)]
    assert events[0].type == "response.created" and events[-1].type == "response.completed"


async def test_max_output_tokens_makes_it_incomplete(sdk: openai.AsyncOpenAI) -> None:
    response = await sdk.responses.create(model=OK, input="a b c d e", max_output_tokens=2)
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"


async def test_function_call_loop_with_previous_response_id(sdk: openai.AsyncOpenAI) -> None:
    first = await sdk.responses.create(
        model=OK,
        instructions="Use tools.",
        input=[{"role": "user", "content": "say " + hermes_call("get_weather", BONN)}],
        tools=[TOOL],  # type: ignore[list-item]
    )
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Bonn"}
    # The fake model answers "roles" with the roles of the whole conversation it got.
    second = await sdk.responses.create(
        model=OK,
        instructions="Use tools.",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "roles"}],
        tools=[TOOL],  # type: ignore[list-item]
    )
    assert second.output_text == "system user assistant tool "
    assert second.previous_response_id == first.id

    # The same conversation sent in full gives the same prompt.
    again = await sdk.responses.create(
        model=OK,
        input=[
            {"role": "developer", "content": "Use tools."},
            {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "roles"},
        ],
    )
    assert again.output_text == "system user assistant tool "


async def test_input_images_reach_a_vision_model(sdk: openai.AsyncOpenAI) -> None:
    image = {"type": "input_image", "image_url": f"data:image/png;base64,{PNG_1PX}"}
    response = await sdk.responses.create(
        model=VISION,
        input=[{"role": "user", "content": [image, {"type": "input_text", "text": "say seen"}]}],  # type: ignore[list-item]
    )
    assert response.output_text == "seen"
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.responses.create(
            model=OK,
            input=[{"role": "user", "content": [image]}],  # type: ignore[list-item]
        )
    assert "does not accept images" in str(info.value)


class City(BaseModel):
    name: str
    population: int


async def test_parse_with_a_pydantic_model(sdk: openai.AsyncOpenAI) -> None:
    parsed = await sdk.responses.parse(
        model=OK, input='say {"name": "Turku", "population": 200000}', text_format=City
    )
    assert parsed.output_parsed == City(name="Turku", population=200000)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "websearch"}]}, "tools[0].type"),
        (
            {"tools": [{"type": "namespace", "name": "n", "tools": [{"type": "x"}]}]},
            "tools[0].tools[0].type",
        ),
        (
            {"tools": [{"type": "namespace", "name": "n", "tools": [{"type": "function"}]}]},
            "tools[0].tools[0].name",
        ),
        ({"tools": [{"type": "namespace", "tools": []}]}, "tools[0].name"),
        ({"tools": [{"type": "namespace", "name": "a b", "tools": []}]}, "tools[0].name"),
        ({"tools": [{"type": "namespace", "name": "a__b", "tools": []}]}, "tools[0].name"),
        ({"tools": [TOOL, TOOL]}, "tools[1]"),
        (
            {"tools": [NAMESPACE], "tool_choice": {"type": "function", "name": "spawn"}},
            "tool_choice",
        ),
        ({"input": [{"type": "computer_call_output"}]}, "input[0].type"),
        ({"input": [{"role": "user", "content": 5}]}, "input[0].content"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"previous_response_id": "resp_nope"}, "previous_response_id"),
    ],
)
async def test_bad_requests_are_400(
    http: httpx.AsyncClient, extra: dict[str, Any], param: str
) -> None:
    r = await http.post("/v1/responses", json={"model": OK, "input": "hi", **extra})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


async def test_namespace_members_reach_the_model_under_flat_names(
    sdk: openai.AsyncOpenAI, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(responses_tools, "_noticed", set())  # as in a fresh gateway
    caplog.set_level("WARNING")
    tools: Any = [TOOL, NAMESPACE, *HOSTED]
    # The fake model says the names of the tools its chat template got.
    response = await sdk.responses.create(model=OK, input="tools", tools=tools)
    assert response.output_text == "get_weather agents__spawn agents__wait "
    # The response lists the tools it ran with: functions and namespaces, not hosted ones.
    assert [t.type for t in response.tools] == ["function", "namespace"]
    assert [t.name for t in response.tools[1].tools] == ["spawn", "wait"]  # type: ignore[union-attr]
    again = await sdk.responses.create(model=OK, input="tools", tools=tools)
    assert again.output_text == response.output_text
    notices = [r.getMessage() for r in caplog.records if "leaving out" in r.getMessage()]
    # One notice per hosted type, not one per request.
    assert len(notices) == len(HOSTED)
    assert any("'file_search'" in n for n in notices)


async def test_a_namespaced_call_goes_back_with_its_namespace(sdk: openai.AsyncOpenAI) -> None:
    tools: Any = [TOOL, NAMESPACE, HOSTED[0]]
    first = await sdk.responses.create(model=OK, input="say " + SPAWN_CALL, tools=tools)
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert (call.namespace, call.name) == ("agents", "spawn")
    assert json.loads(call.arguments) == {"task": "tests"}

    # Continued from the store, and sent back in full as Codex does (store: false).
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "roles"}
    second = await sdk.responses.create(
        model=OK, previous_response_id=first.id, input=[output], tools=tools
    )
    assert second.output_text == "user assistant tool "
    history: Any = [
        {"role": "user", "content": "say " + SPAWN_CALL},
        call.model_dump(exclude_none=True),
        output,
    ]
    third = await sdk.responses.create(model=OK, input=history, tools=tools, store=False)
    assert third.output_text == "user assistant tool "

    # A forced call of a namespace member names the namespace.
    choice: Any = {"type": "function", "name": "spawn", "namespace": "agents"}
    forced = await sdk.responses.create(
        model=OK, input="say " + SPAWN_CALL, tools=tools, tool_choice=choice
    )
    assert [(i.namespace, i.name) for i in forced.output if i.type == "function_call"] == [
        ("agents", "spawn")
    ]


async def test_a_namespaced_call_in_the_stream(http: httpx.AsyncClient) -> None:
    body = {
        "model": OK,
        "input": "say " + SPAWN_CALL,
        "tools": [NAMESPACE, *HOSTED],
        "stream": True,
    }
    events = sse_events((await http.post("/v1/responses", json=body)).content)
    calls = [e for _, e in events if e.get("item", {}).get("type") == "function_call"]
    assert [e["type"] for e in calls] == [
        "response.output_item.added",
        "response.output_item.done",
    ]
    for event in calls:
        assert (event["item"]["namespace"], event["item"]["name"]) == ("agents", "spawn")
    (done,) = [e for _, e in events if e["type"] == "response.function_call_arguments.done"]
    assert done["name"] == "spawn"
    (item,) = [i for i in events[-1][1]["response"]["output"] if i["type"] == "function_call"]
    assert (item["namespace"], item["name"]) == ("agents", "spawn")


def test_input_calls_of_a_namespace_get_the_flat_name() -> None:
    items = input_items(
        [
            {
                "type": "function_call",
                "call_id": "c1",
                "name": "spawn",
                "namespace": "agents",
                "arguments": "{}",
            },
            {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": "{}"},
        ]
    )
    (message,) = to_chat(items)
    names = [call["function"]["name"] for call in message["tool_calls"]]
    assert names == ["agents__spawn", "get_weather"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_prompt_beyond_the_context_names_input(
    http: httpx.AsyncClient, stream: bool
) -> None:
    # The fake worker answers "reject" as a real one answers a prompt too long.
    r = await http.post("/v1/responses", json={"model": OK, "input": "reject", "stream": stream})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"]) == ("input", "context_length_exceeded")


def test_store_expires_and_keeps_to_its_byte_cap() -> None:
    now = [0.0]
    store = ResponseStore(ttl=10, max_bytes=600, clock=lambda: now[0])

    def put(n: int) -> None:
        store.put({"id": f"r{n}", "text": "x" * 100}, [], [{"role": "user", "content": "y" * 50}])

    put(1)
    now[0] = 5
    put(2)
    assert store.get("r1") is not None and store.get("r2") is not None
    now[0] = 11  # r1 is 11 s old, r2 6 s
    assert store.get("r1") is None and store.get("r2") is not None
    for n in range(3, 8):
        put(n)
    assert store.bytes <= 600
    assert store.get("r2") is None and store.get("r7") is not None  # the oldest went first
    assert not store.put({"id": "big", "text": "z" * 1000}, [], [])
    assert store.delete("r7") and not store.delete("r7")
