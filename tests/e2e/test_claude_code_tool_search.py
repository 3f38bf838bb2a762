"""Claude Code's own tool search, end to end: the real client (2.1.3xx) sends its
``ToolSearch`` function and its other tools with ``defer_loading``; a scripted model
(the fake worker behind the real gateway command) calls ``ToolSearch``, Claude Code
answers with a ``tool_reference`` to ``CronList``, the gateway puts that tool's
definition in front of the model where the result stands, and the model's call of
``CronList`` comes back as a ``tool_use`` that Claude Code runs. Every request of the
session is answered 200 (through a recording proxy)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .gateway import Gateway, fake_worker_entry
from .test_coding_agents_anthropic import claude_code, run_claude

pytestmark = pytest.mark.slow
__all__ = ["claude_code"]  # fixtures

SCRIPTED = "scripted-coder"


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """The gateway command with one model: the fake worker, whose ``script`` pieces
    say what the model writes in each round (Hermes tool calls, parsed by the
    gateway as for a real model)."""
    tmp = tmp_path_factory.mktemp("cc-tool-search")
    model = fake_worker_entry(tmp, "ok", SCRIPTED, tool_call_parser="hermes", idle_timeout=0)
    gw = Gateway(tmp, [model], log_level="debug")
    try:
        yield gw
    finally:
        gw.stop()


def call(name: str, arguments: dict[str, Any]) -> str:
    return f"say <tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def tool_results(body: dict[str, Any]) -> list[Any]:
    return [
        block
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]


def test_claude_codes_tool_search_loads_and_calls_a_deferred_tool(
    claude_code: Path, scripted: Gateway, tmp_path: Path
) -> None:
    script = " ;; ".join(
        [call("ToolSearch", {"query": "select:CronList"}), call("CronList", {}), "say done"]
    )
    started = time.monotonic()
    session = run_claude(claude_code, scripted, tmp_path, SCRIPTED, f"script {script}")
    print(f"three rounds in {time.monotonic() - started:.1f} s")
    bodies = [e.body for e in session.messages]
    assert len(bodies) == 3, [(e.path, e.status) for e in session.exchanges]
    first, searched, called = bodies
    names = {t["name"]: t for t in first["tools"]}
    assert "ToolSearch" in names and not any(
        t.get("defer_loading") for t in names.values() if t["name"] == "CronList"
    )
    # Claude Code answered its ToolSearch with a reference to the tool it found, and
    # sent that tool along, still deferred.
    reference = tool_results(searched)[-1]
    assert {"type": "tool_reference", "tool_name": "CronList"} in reference["content"]
    cron = next(t for t in searched["tools"] if t["name"] == "CronList")
    assert cron.get("defer_loading") is True
    # The model's call of CronList reached Claude Code as a tool_use, which it ran.
    answer = session.messages[1].answer.decode()
    assert '"name":"CronList"' in answer.replace(" ", ""), answer[-2000:]
    assert any(
        block.get("type") == "tool_use" and block["name"] == "CronList"
        for message in called["messages"]
        if message["role"] == "assistant" and isinstance(message["content"], list)
        for block in message["content"]
    )
    assert len(tool_results(called)) == 2


def test_a_session_with_claude_codes_everyday_tools(
    claude_code: Path, scripted: Gateway, tmp_path: Path
) -> None:
    """Write, Read, Bash and a subagent (Agent), each round's request answered 200:
    the shapes a working session sends (tool results with line numbers, a subagent's
    own system prompt, parallel history), captured with the real client."""
    script = " ;; ".join(
        [
            call("Write", {"file_path": str(tmp_path / "project" / "note.txt"), "content": "hi\n"}),
            call("Read", {"file_path": str(tmp_path / "project" / "note.txt")}),
            call("Bash", {"command": "cat note.txt", "description": "Show the note"}),
            call(
                "Agent",
                {"description": "Look", "prompt": "say found it", "subagent_type": "claude"},
            ),
            "say done",
        ]
    )
    allowed = ("--allowedTools", "Write,Read,Bash(cat:*),Agent")
    session = run_claude(
        claude_code, scripted, tmp_path, SCRIPTED, f"script {script}", flags=allowed
    )
    statuses = [(e.path, e.status) for e in session.exchanges]
    assert (tmp_path / "project" / "note.txt").read_text() == "hi\n", statuses
    print(statuses)
    assert len(session.messages) >= 5, statuses
    last = session.messages[-1].body
    results = tool_results(last)
    assert len(results) >= 4, results
    assert "hi" in json.dumps(results[1])  # Read gave the file back
