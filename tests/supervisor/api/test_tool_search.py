"""Tool search: tools with ``defer_loading`` stay out of the prompt until the model's
search (Anthropic's ``tool_search_tool_regex_*`` / ``_bm25_*``, OpenAI's
``tool_search``) or a client's ``tool_reference`` loads them; the official SDKs
read the answers with strict validation. The fake model says the names of the tools
its chat template got (``tools``) and plays one scripted piece per round
(``script a ;; b``)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
from starlette.applications import Starlette

from .lm_app import OK, app, hermes_call, http, sdk
from .test_anthropic_api import client_for

__all__ = ["app", "http", "sdk"]  # fixtures

WEATHER = {
    "name": "get_weather",
    "description": "The weather forecast for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "The city's name."}},
        "required": ["city"],
    },
}
READ = {
    "name": "read_file",
    "description": "Read a file of the project",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
}
SERVICES = ["github", "slack", "jira", "sentry", "grafana", "linear"]
ACTIONS = ["create", "update", "delete", "list", "get", "search", "comment", "assign", "close"]
ITEMS = ["issue", "message", "ticket", "alert", "dashboard", "project", "user", "release"]


def realistic_tools(count: int) -> list[dict[str, Any]]:
    """``count`` MCP-like tools of several services, with described arguments."""
    out = []
    for i in range(count):
        service = SERVICES[i % len(SERVICES)]
        action = ACTIONS[i % len(ACTIONS)]
        item = ITEMS[i % len(ITEMS)]
        properties = {
            "workspace": {"type": "string", "description": f"The {service} workspace or org."},
            "id": {"type": "string", "description": f"The id of the {item} to {action}."},
            "fields": {
                "type": "object",
                "description": f"Fields of the {item}: title, body, labels, assignees.",
                "additionalProperties": {"type": "string"},
            },
            "limit": {"type": "integer", "description": "Most results to answer (1 to 100)."},
        }
        out.append(
            {
                "name": f"mcp__{service}__{action}_{item}_{i}",
                "description": (
                    f"{action.capitalize()} a {item} in {service}. Use it when the user asks "
                    f"to {action} {item}s; answers the {item} as JSON with its id and URL."
                ),
                "input_schema": {
                    "type": "object",
                    "properties": properties,
                    "required": ["workspace", "id"],
                },
            }
        )
    return out


def deferred(*tools: dict[str, Any]) -> list[dict[str, Any]]:
    return [{**tool, "defer_loading": True} for tool in tools]


REGEX = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
BM25 = {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}


def search(argument: str, value: str) -> str:
    return hermes_call("tool_search", json.dumps({argument: value}))


async def test_the_first_round_sees_the_search_tool_not_the_deferred_tools(app: Starlette) -> None:
    async with client_for(app) as client:
        message = await client.beta.messages.create(
            model=OK,
            max_tokens=100,
            messages=[{"role": "user", "content": "tools"}],
            tools=[READ, *deferred(WEATHER, *realistic_tools(3)), REGEX],  # type: ignore[list-item]
            betas=["advanced-tool-use-2025-11-20"],
        )
    text = "".join(b.text for b in message.content if b.type == "text")
    assert text.split() == ["read_file", "tool_search"]


async def test_anthropic_a_search_loads_a_tool_that_the_model_then_calls(app: Starlette) -> None:
    script = f"script say {search('pattern', 'weather|forecast')} ;; say " + hermes_call(
        "get_weather", '{"city": "Oslo"}'
    )
    async with client_for(app) as client:
        message = await client.beta.messages.create(
            model=OK,
            max_tokens=300,
            messages=[{"role": "user", "content": script}],
            tools=[READ, *deferred(WEATHER, *realistic_tools(5)), REGEX],  # type: ignore[list-item]
            betas=["advanced-tool-use-2025-11-20"],
        )
    kinds = [block.type for block in message.content]
    assert kinds == ["server_tool_use", "tool_search_tool_result", "tool_use"], kinds
    use, result, call = message.content
    assert use.name == "tool_search_tool_regex"  # type: ignore[union-attr]
    assert use.input == {"pattern": "weather|forecast"}  # type: ignore[union-attr]
    assert result.tool_use_id == use.id  # type: ignore[union-attr]
    found = result.content  # type: ignore[union-attr]
    assert found.type == "tool_search_tool_search_result"
    assert [r.tool_name for r in found.tool_references] == ["get_weather"]
    assert call.name == "get_weather" and call.input == {"city": "Oslo"}  # type: ignore[union-attr]
    assert message.stop_reason == "tool_use"  # a client tool: the client runs it


async def test_the_next_round_gets_the_tools_a_bm25_search_found(app: Starlette) -> None:
    script = f"script say {search('query', 'weather city')} ;; tools"
    async with client_for(app) as client:  # the plain client: no beta declared
        message = await client.messages.create(
            model=OK,
            max_tokens=300,
            messages=[{"role": "user", "content": script}],
            tools=[READ, *deferred(WEATHER, *realistic_tools(8)), BM25],  # type: ignore[list-item]
        )
    use, result, answer = message.content
    assert use.name == "tool_search_tool_bm25"  # type: ignore[union-attr]
    names = [r.tool_name for r in result.content.tool_references]  # type: ignore[union-attr]
    assert names[0] == "get_weather"
    words = answer.text.split()  # type: ignore[union-attr]
    assert words[:2] == ["read_file", "tool_search"] and "get_weather" in words
    assert not any(w.startswith("mcp__") and w not in names for w in words)


def referencing(tool_name: str, then: str) -> list[Any]:
    """A conversation whose tool result references ``tool_name``, and whose last
    user text is ``then`` (what the fake model does next)."""
    return [
        {"role": "user", "content": "find the weather tool"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "tool_reference", "tool_name": tool_name}],
                },
                {"type": "text", "text": then},
            ],
        },
    ]


async def test_a_tool_reference_puts_the_definition_where_it_stands(app: Starlette) -> None:
    """The referenced tool's definition is in the tool result, not in the template's
    tool list, so the prompt before that result is the one the last turn had."""
    tools = [READ, *deferred(WEATHER, *realistic_tools(3)), REGEX]
    said = {}
    async with client_for(app) as client:
        for asked in ("tools", "results"):  # the template's tools; the tool messages
            message = await client.beta.messages.create(
                model=OK,
                max_tokens=200,
                messages=referencing("get_weather", asked),
                tools=tools,  # type: ignore[arg-type]
                betas=["advanced-tool-use-2025-11-20"],
            )
            said[asked] = " ".join(b.text for b in message.content if b.type == "text")
    assert said["tools"].split() == ["read_file", "tool_search"]
    words = said["results"]
    assert '<functions> <function>{"description": "The weather forecast for a city",' in words
    assert '"name": "get_weather"' in words
    assert "The city's name." in words  # its schema, argument descriptions and all


async def test_a_clients_own_tool_search(app: Starlette) -> None:
    """Claude Code's tool search (2.1.3xx): its own ``ToolSearch`` function, deferred
    tools and no search tool of the gateway's. The deferred tools stay out of the
    prompt; once a tool result references one, the model's call of it comes back as
    a ``tool_use``."""
    search = {
        "name": "ToolSearch",
        "description": "Find deferred tools",
        "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
    }
    placeholder = {**READ, "name": "DeferredToolPlaceholder", "defer_loading": True}
    tools = [search, READ, placeholder, *deferred(WEATHER, *realistic_tools(3))]
    call = hermes_call("get_weather", '{"city": "Oslo"}')
    async with client_for(app) as client:
        first = await client.beta.messages.create(
            model=OK,
            max_tokens=100,
            messages=[{"role": "user", "content": "tools"}],
            tools=tools,  # type: ignore[arg-type]
        )
        counted = await client.messages.count_tokens(
            model=OK,
            messages=[{"role": "user", "content": "tools"}],
            tools=tools,  # type: ignore[arg-type]
        )
        inline = await client.messages.count_tokens(
            model=OK,
            messages=[{"role": "user", "content": "tools"}],
            tools=[search, READ, WEATHER, *realistic_tools(3)],  # type: ignore[list-item]
        )
        called = await client.beta.messages.create(
            model=OK,
            max_tokens=200,
            messages=referencing("get_weather", f"say {call}"),
            tools=tools,  # type: ignore[arg-type]
        )
    assert "".join(b.text for b in first.content if b.type == "text").split() == [
        "ToolSearch",
        "read_file",
    ]
    assert counted.input_tokens < inline.input_tokens
    assert called.stop_reason == "tool_use"
    use = next(b for b in called.content if b.type == "tool_use")
    assert use.name == "get_weather" and use.input == {"city": "Oslo"}
    assert use.id.startswith("toolu_")


async def test_sixty_deferred_tools_cost_a_quarter_of_their_schemas(app: Starlette) -> None:
    tools = realistic_tools(60)
    messages: Any = [{"role": "user", "content": "Open an issue about the flaky test."}]
    async with client_for(app) as client:
        inlined = await client.messages.count_tokens(model=OK, messages=messages, tools=tools)  # type: ignore[arg-type]
        searched = await client.beta.messages.count_tokens(
            model=OK,
            messages=messages,
            tools=[*deferred(*tools), REGEX],  # type: ignore[list-item]
            betas=["advanced-tool-use-2025-11-20"],
        )
    print(f"60 tools: inlined {inlined.input_tokens}, deferred {searched.input_tokens}")
    assert searched.input_tokens * 4 <= inlined.input_tokens


OPENAI_WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather forecast for a city",
    "parameters": WEATHER["input_schema"],
    "defer_loading": True,
}


async def test_responses_tool_search_loads_a_function(sdk: openai.AsyncOpenAI) -> None:
    script = f"script say {search('query', 'weather')} ;; say " + hermes_call(
        "get_weather", '{"city": "Oslo"}'
    )
    others = [
        {"type": "function", "name": t["name"], "description": t["description"],
         "parameters": t["input_schema"], "defer_loading": True}
        for t in realistic_tools(4)
    ]  # fmt: skip
    response = await sdk.responses.create(
        model=OK,
        input=script,
        tools=[OPENAI_WEATHER, *others, {"type": "tool_search"}],  # type: ignore[list-item]
    )
    kinds = [item.type for item in response.output]
    assert kinds == ["tool_search_call", "tool_search_output", "function_call"], kinds
    call, output, function_call = response.output
    assert call.execution == "server" and call.status == "completed"  # type: ignore[union-attr]
    assert call.arguments == {"query": "weather"}  # type: ignore[union-attr]
    assert output.call_id == call.call_id  # type: ignore[union-attr]
    assert [t.name for t in output.tools] == ["get_weather"]  # type: ignore[union-attr]
    assert function_call.name == "get_weather"  # type: ignore[union-attr]


async def test_responses_first_round_has_no_deferred_function(sdk: openai.AsyncOpenAI) -> None:
    response = await sdk.responses.create(
        model=OK,
        input="tools",
        tools=[OPENAI_WEATHER, {"type": "tool_search"}],  # type: ignore[list-item]
    )
    assert response.output_text.split() == ["tool_search"]


async def test_responses_tool_search_streams(http: httpx.AsyncClient) -> None:
    body = {
        "model": OK,
        "input": f"script say {search('query', 'weather')} ;; done",
        "tools": [OPENAI_WEATHER, {"type": "tool_search"}],
        "stream": True,
    }
    async with http.stream("POST", "/v1/responses", json=body) as reply:
        assert reply.status_code == 200
        text = (await reply.aread()).decode()
    items = [
        json.loads(line[len("data: ") :])["item"]["type"]
        for line in text.splitlines()
        if line.startswith("data: ") and '"response.output_item.done"' in line
    ]
    assert items == ["tool_search_call", "tool_search_output", "message"], items
