"""The tool loop (reply/tool_loop.py, started by reply/opening.py with the tools of
reply/server_tools.py): the model's calls of server tools run between its rounds,
the round limit and the last round without tools, the token budget over all
rounds, a call the budget cut, approvals, failing tools, calls that run at once,
and a client's own call ending the turn. The model's rounds are a scripted worker's
(its text through the real parsers), the MCP servers scripted ones."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest

from mlx_gateway.supervisor.engine.ask import Ask, text_model
from mlx_gateway.supervisor.engine.server_tools import ApprovedCall, ServerToolSpec
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.reply.opening import prepare
from mlx_gateway.supervisor.reply.tool_loop import LIMIT_NOTE, ToolLoop
from mlx_gateway.supervisor.tools.results import ToolOutput

from ..api.fakes import defaults
from .fakes import (
    FakeMcp,
    FakeMcpServer,
    Round,
    SayRequest,
    ScriptedHandle,
    as_row,
    called,
    offered,
    said,
    seen,
    tool,
)
from .gateway import gateway, mcp_of, say_ask

NOW = "time__now"
"""The time server's ``now`` tool as the model sees it (label, separator, name)."""


def scripted(*script: Round) -> ScriptedHandle:
    return ScriptedHandle("org/m", config=defaults(), script=list(script))


def time_ask(**fields: Any) -> Ask:
    """A request offering the config's MCP server ``time``."""
    return say_ask(SayRequest(model="org/m", text="what time is it?", mcp=["time"], **fields))


async def turn(
    handle: ScriptedHandle, ask: Ask, mcp: FakeMcp | None = None, **config: Any
) -> list[dict[str, Any]]:
    """The turn's events (as rows) once it ran to its end, prepared as the serve
    prepares it."""
    mcp = mcp if mcp is not None else FakeMcp({"time": FakeMcpServer()})
    app = gateway(handle, mcp=mcp, **config)
    model = text_model(handle, ask.kinds, ask.endpoint)
    opening = await prepare(mcp_of(app), model, ask, None, "turn-1")
    running = await opening.start()
    try:
        return [as_row(event) async for event in running.choice(0)]
    finally:
        await running.aclose()


def only(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return [row for row in rows if key in row]


def text(rows: list[dict[str, Any]]) -> str:
    """What the model wrote (the text deltas)."""
    return "".join(row["text"] for row in rows if list(row) == ["text"])


async def test_a_call_runs_and_the_next_round_answers_from_its_result() -> None:
    handle = scripted(
        Round(said("Let me look.") + called(NOW, x="UTC")), Round(said("It is noon."))
    )
    server = FakeMcpServer()
    rows = await turn(handle, time_ask(), FakeMcp({"time": server}))
    assert rows[0] == {"listed": "time", "tools": [NOW], "error": None}
    assert only(rows, "server_call") == [{"server_call": NOW, "arguments": '{"x": "UTC"}'}]
    assert only(rows, "result") == [{"result": NOW, "text": 'now {"x": "UTC"}', "is_error": False}]
    assert text(rows).strip() == "Let me look.It is noon."
    # One Finished for the whole turn, its usage the rounds' sum (3 + 3 and 3 tokens).
    assert rows[-1] == {"finish": "stop", "prompt_tokens": 14, "completion_tokens": 9}
    assert server.calls == [("now", {"x": "UTC"}, "anonymous")]
    first, second = handle.sent
    assert NOW in offered(first) and second.request_id == "turn-1-2"
    assistant, result = seen(second)[-2:]
    assert assistant["role"] == "assistant"
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == [NOW]
    assert result == {
        "role": "tool",
        "tool_call_id": assistant["tool_calls"][0]["id"],
        "content": 'now {"x": "UTC"}',
    }


async def test_after_max_rounds_one_more_round_answers_without_tools() -> None:
    calling = Round(called(NOW, x="UTC"))
    handle = scripted(calling, calling, Round(said("It is noon.")))
    server = FakeMcpServer()
    rows = await turn(handle, time_ask(), FakeMcp({"time": server}), max_rounds=2)
    assert len(handle.sent) == 3  # two rounds with tools, one without
    assert len(server.calls) == 2 and len(only(rows, "result")) == 2
    assert text(rows) == "It is noon."
    assert rows[-1] == {"finish": "stop", "prompt_tokens": 21, "completion_tokens": 9}
    first, second, last = handle.sent
    assert NOW in offered(first) and NOW in offered(second)
    assert NOW not in offered(last)
    note = LIMIT_NOTE.format(rounds=2)
    assert seen(last)[-1]["content"] == f'now {{"x": "UTC"}}\n\n{note}'
    assert note not in seen(second)[-1]["content"]


async def test_a_server_call_after_the_round_limit_is_not_run() -> None:
    # With a client function the last round still parses calls: one of a server
    # tool is dropped there, and the answer ends as if it had not been made.
    calling = Round(called(NOW, x="UTC"))
    handle = scripted(calling, Round(said("Still") + called(NOW, x="CET")))
    server = FakeMcpServer()
    ask = time_ask(functions=["lookup"])
    rows = await turn(handle, ask, FakeMcp({"time": server}), max_rounds=1)
    assert len(handle.sent) == 2
    assert offered(handle.sent[1]) == ["lookup"]
    assert [call[1] for call in server.calls] == [{"x": "UTC"}]
    assert len(only(rows, "server_call")) == 1 and only(rows, "client_call") == []
    assert text(rows) == "Still"  # the dropped call is not text either
    assert rows[-1]["finish"] == "stop"


async def test_a_round_without_a_call_ends_the_loop_before_the_limit() -> None:
    handle = scripted(Round(said("No tools needed.")))
    rows = await turn(handle, time_ask(), max_rounds=1)
    assert len(handle.sent) == 1 and only(rows, "server_call") == []
    assert rows[-1]["finish"] == "stop"


async def test_the_token_budget_is_the_whole_turns() -> None:
    # max_tokens 8: the first round spends 5 (two words, a three-token call), the
    # second may spend the 3 left, and is cut there.
    handle = scripted(
        Round(said("Looking now") + called(NOW, x="UTC")), Round(said("one two three four five"))
    )
    rows = await turn(handle, time_ask(max_tokens=8))
    first, second = handle.sent
    assert (first.sampling.max_tokens, second.sampling.max_tokens) == (8, 3)
    assert text(rows).endswith("one two three ")
    assert rows[-1] == {"finish": "length", "prompt_tokens": 14, "completion_tokens": 8}


async def test_a_call_cut_by_the_budget_is_not_run() -> None:
    # 7 tokens: the second round's call gets 2 of its 3 and is cut off midway.
    handle = scripted(
        Round(said("Looking now") + called(NOW, x="UTC")), Round(called(NOW, x="CET"))
    )
    server = FakeMcpServer()
    rows = await turn(handle, time_ask(max_tokens=7), FakeMcp({"time": server}))
    assert [call[1] for call in server.calls] == [{"x": "UTC"}]
    assert len(only(rows, "server_call")) == 1
    assert "tool_call" not in text(rows) and "CET" not in text(rows)  # no half call as text
    assert rows[-1] == {"finish": "length", "prompt_tokens": 14, "completion_tokens": 7}


async def test_a_budget_spent_by_a_calling_round_ends_the_turn() -> None:
    handle = scripted(Round(said("Looking now") + called(NOW, x="UTC")))
    server = FakeMcpServer()
    rows = await turn(handle, time_ask(max_tokens=5), FakeMcp({"time": server}))
    assert len(handle.sent) == 1  # no round left to read the result
    assert len(server.calls) == 1 and len(only(rows, "result")) == 1
    assert rows[-1]["finish"] == "length"


def with_approval(ask: Ask) -> Ask:
    spec = ServerToolSpec("mcp", type="mcp", name="time", require_approval="always")
    return dataclasses.replace(ask, server_tools=[spec])


async def test_a_call_that_needs_approval_waits_for_the_client() -> None:
    handle = scripted(Round(said("May I?") + called(NOW, x="UTC")))
    server = FakeMcpServer()
    rows = await turn(handle, with_approval(time_ask()), FakeMcp({"time": server}))
    assert only(rows, "approval") == [{"approval": NOW}]
    assert server.calls == [] and only(rows, "server_call") == []
    assert len(handle.sent) == 1 and rows[-1]["finish"] == "tool_calls"


async def test_an_approved_call_runs_before_the_first_round() -> None:
    handle = scripted(Round(said("It is noon.")))
    server = FakeMcpServer()
    approved = [ApprovedCall("call_9", NOW, '{"x": "UTC"}', approve=True)]
    ask = dataclasses.replace(with_approval(time_ask()), approved=approved)
    rows = await turn(handle, ask, FakeMcp({"time": server}))
    assert [next(iter(row)) for row in rows[:3]] == ["listed", "server_call", "result"]
    assert server.calls == [("now", {"x": "UTC"}, "anonymous")]
    assistant, result = seen(handle.sent[0])[-2:]
    assert assistant["tool_calls"][0]["id"] == "call_9"
    assert result["tool_call_id"] == "call_9" and result["content"] == 'now {"x": "UTC"}'
    assert rows[-1]["finish"] == "stop"


async def test_a_refused_call_is_not_run_and_the_model_is_told() -> None:
    handle = scripted(Round(said("Fine.")))
    server = FakeMcpServer()
    refused = [ApprovedCall("call_9", NOW, "{}", approve=False, reason="not now")]
    ask = dataclasses.replace(with_approval(time_ask()), approved=refused)
    rows = await turn(handle, ask, FakeMcp({"time": server}))
    told = "The user did not approve this call: not now"
    assert only(rows, "result") == [{"result": NOW, "text": told, "is_error": True}]
    assert server.calls == []
    assert seen(handle.sent[0])[-1]["content"] == told


async def test_an_approval_for_a_tool_not_offered_is_a_400() -> None:
    handle = scripted()
    approved = [ApprovedCall("call_9", "time__gone", "{}", approve=True)]
    ask = dataclasses.replace(with_approval(time_ask()), approved=approved)
    with pytest.raises(BadRequest) as refused:
        await turn(handle, ask)
    assert refused.value.param == "input" and "time__gone" in refused.value.message
    assert handle.sent == []


async def test_a_failing_tool_is_an_error_result_and_the_turn_goes_on() -> None:
    async def fails(name: str, arguments: dict[str, Any]) -> ToolOutput:
        if arguments["x"] == "bug":
            raise RuntimeError("the tool broke")
        return ToolOutput(text="no such zone", is_error=True)

    calls = Round(called(NOW, x="bug") + called(NOW, x="Mars"))
    handle = scripted(calls, Round(said("Sorry.")))
    rows = await turn(handle, time_ask(), FakeMcp({"time": FakeMcpServer(answer=fails)}))
    assert only(rows, "result") == [
        {"result": NOW, "text": f"{NOW} failed: the tool broke", "is_error": True},
        {"result": NOW, "text": "no such zone", "is_error": True},
    ]
    assert [m["content"] for m in seen(handle.sent[1])[-2:]] == [
        f"{NOW} failed: the tool broke",
        "no such zone",
    ]
    assert rows[-1]["finish"] == "stop"


async def test_arguments_that_are_no_object_are_an_error_result() -> None:
    bad = "<tool_call>\n" + json.dumps({"name": NOW, "arguments": "UTC"}) + "\n</tool_call>"
    handle = scripted(Round((bad,)), Round(said("Sorry.")))
    server = FakeMcpServer()
    rows = await turn(handle, time_ask(), FakeMcp({"time": server}))
    (result,) = only(rows, "result")
    assert result["is_error"] and "not a JSON object" in result["text"]
    assert server.calls == []


async def test_a_server_whose_tools_cannot_be_listed_leaves_a_plain_turn() -> None:
    broken = FakeMcpServer(list_error=RuntimeError("no answer"))
    handle = scripted(Round(said("I cannot tell.")))
    rows = await turn(handle, time_ask(), FakeMcp({"time": broken}))
    assert rows[0] == {"listed": "time", "tools": [], "error": "no answer"}
    assert offered(handle.sent[0]) == [] and rows[-1]["finish"] == "stop"


async def test_a_rounds_calls_run_at_once() -> None:
    # Each waits for the other to start: run one after the other they never end.
    began = {"a": asyncio.Event(), "b": asyncio.Event()}

    async def meets(name: str, arguments: dict[str, Any]) -> ToolOutput:
        me, other = arguments["x"], "b" if arguments["x"] == "a" else "a"
        began[me].set()
        await asyncio.wait_for(began[other].wait(), 10)  # the failure bound
        return ToolOutput(text=f"{me} met {other}")

    handle = scripted(Round(called(NOW, x="a") + called(NOW, x="b")), Round(said("Both.")))
    rows = await turn(handle, time_ask(), FakeMcp({"time": FakeMcpServer(answer=meets)}))
    assert [r["text"] for r in only(rows, "result")] == ["a met b", "b met a"]


async def test_a_clients_own_call_ends_the_turn() -> None:
    handle = scripted(Round(called(NOW, x="UTC") + called("lookup", q="x")))
    server = FakeMcpServer()
    rows = await turn(handle, time_ask(functions=["lookup"]), FakeMcp({"time": server}))
    assert only(rows, "client_call") == [{"client_call": "lookup", "arguments": '{"q": "x"}'}]
    assert len(server.calls) == 1  # the server's call still ran
    assert len(handle.sent) == 1 and rows[-1]["finish"] == "tool_calls"


async def test_the_tools_of_several_servers_and_their_allowed_tools() -> None:
    mcp = FakeMcp(
        {
            "time": FakeMcpServer(tools=[tool("now"), tool("zones")]),
            "git": FakeMcpServer(tools=[tool("log"), tool("push")]),
        }
    )
    git = ServerToolSpec("mcp", type="mcp", name="git", allowed_tools=["log"])
    ask = time_ask()
    ask = dataclasses.replace(ask, server_tools=[*ask.server_tools, git])
    handle = scripted(Round(said("ok")))
    rows = await turn(handle, ask, mcp)
    assert only(rows, "listed") == [
        {"listed": "time", "tools": ["time__now", "time__zones"], "error": None},
        {"listed": "git", "tools": ["git__log"], "error": None},
    ]
    assert offered(handle.sent[0]) == ["time__now", "time__zones", "git__log"]


async def test_a_turn_without_server_tools_is_no_loop() -> None:
    handle = scripted(Round(said("hi")))
    app = gateway(handle)
    ask = say_ask(SayRequest(model="org/m", text="hello"))
    opening = await prepare(
        mcp_of(app), text_model(handle, ask.kinds, ask.endpoint), ask, None, "t"
    )
    running = await opening.start()
    try:
        assert not isinstance(running, ToolLoop)
        assert [as_row(e) async for e in running.choice(0)][-1]["finish"] == "stop"
    finally:
        await running.aclose()
