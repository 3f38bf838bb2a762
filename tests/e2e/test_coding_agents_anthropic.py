"""Coding agents on the Anthropic Messages API, against a whole gateway process
serving a tiny random llama with 32768 positions (and an end-of-sequence token it
reaches after a few tokens, so answers end by themselves):

* Claude Code itself (npm ``@anthropic-ai/claude-code``, installed by the test
  setup), ``claude -p`` with its default tools and its default ``max_tokens``
  (32000, more than the context leaves beside its prompt), through a recording
  proxy: every request of a session answered 200 as the client sent it (its system
  message inside ``messages``, its own tool search's deferred tools), so no silent
  retry in another shape; the budget cut to fit (``max_tokens_overflow: clamp``,
  the default); with ``error``, its retry with a smaller ``max_tokens`` when the
  gateway words the overflow the way Anthropic does; a second session with another
  first message reads the prompt it shares with the first from the cache (its
  billing block, different in every session, is not prompt);
* the ``anthropic`` SDK: a forced tool call streamed, its result sent back, and the
  final answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from ..fixtures.npm import npm, npm_install
from .gateway import Gateway
from .recording_proxy import Exchange, RecordingProxy

pytestmark = pytest.mark.slow

MODEL = "tiny-coder"
STRICT = "tiny-coder-strict"
"""The same model with ``max_tokens_overflow: error``."""
CLAUDE_CODE_DIR = Path.home() / ".cache" / "mlx-gateway-tests" / "claude-code"
CLAUDE_CODE_VERSION = os.environ.get("MLX_GATEWAY_TEST_CLAUDE_CODE", "2.1.332")
"""The release the test runs (the last one checked); ``latest`` tries the newest."""
CLAUDE_CODE_ENV = {
    # No internet: no telemetry, error reports, update checks or other side traffic.
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
}


@pytest.fixture(scope="session")
def claude_code() -> Path:
    """The ``claude`` command, installed (or brought up to date) from the npm registry
    into a cache folder of the tests."""
    install = npm_install(
        CLAUDE_CODE_DIR,
        f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}",
        timeout=600,
        what="Claude Code",
    )
    if install.returncode != 0:
        if npm("ping", timeout=60, what="Claude Code").returncode != 0:
            pytest.skip(f"the npm registry is unreachable:\n{install.stderr[-2000:]}")
        raise AssertionError(f"npm install @anthropic-ai/claude-code failed:\n{install.stderr}")
    claude = CLAUDE_CODE_DIR / "node_modules" / ".bin" / "claude"
    assert claude.exists(), f"npm installed no {claude}"
    return claude


@pytest.fixture(scope="module")
def gateway(tiny_lm_32k_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("coding-agents")
    model = {
        "model_path": str(tiny_lm_32k_path),
        "served_model_name": MODEL,
        "idle_timeout": 0,
        "on_demand": False,
    }
    strict = {**model, "served_model_name": STRICT, "max_tokens_overflow": "error"}
    # debug: the log shows the betas and ignored fields of each Messages request.
    gw = Gateway(tmp, [model, strict], log_level="debug")
    try:
        deadline = time.monotonic() + 60
        while any(gw.model(name)["state"] != "ready" for name in (MODEL, STRICT)):
            assert time.monotonic() < deadline, gw.log()
            time.sleep(0.2)
        yield gw
    finally:
        gw.stop()


@dataclass
class Session:
    """One ``claude -p`` run: the gateway log it added and what it sent."""

    log: str
    exchanges: list[Exchange]

    @property
    def messages(self) -> list[Exchange]:
        return [e for e in self.exchanges if e.path.startswith("/v1/messages")]


def run_claude(
    claude_code: Path,
    gateway: Gateway,
    tmp: Path,
    model: str,
    prompt: str = "Say hello.",
    *,
    refusals: bool = False,
    flags: tuple[str, ...] = (),
) -> Session:
    """``claude -p`` on ``model`` with a fresh HOME (unless ``tmp`` has one) and
    nothing of ours but the gateway's address, through a recording proxy; asserts it
    succeeded and, unless ``refusals``, that no request of it was refused."""
    home, project = tmp / "home", tmp / "project"
    home.mkdir(exist_ok=True)
    project.mkdir(exist_ok=True)
    proxy = RecordingProxy("127.0.0.1", gateway.port)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": proxy.base_url,
        "ANTHROPIC_API_KEY": "sk-local",
        **CLAUDE_CODE_ENV,
    }
    before = len(gateway.log())
    started = time.monotonic()
    try:
        run = subprocess.run(
            [str(claude_code), "-p", prompt, "--model", model, *flags],
            cwd=project,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        proxy.close()
    took = time.monotonic() - started
    version = subprocess.run(
        [str(claude_code), "--version"], env=env, capture_output=True, text=True, check=False
    ).stdout.strip()
    print(f"{version}: claude -p on {model} took {took:.1f} s")
    output = run.stdout + run.stderr
    assert run.returncode == 0, f"{output}\n--- gateway log ---\n{gateway.log()[-5000:]}"
    assert "API Error" not in output
    if not refusals:
        proxy.assert_none_refused()
    return Session(gateway.log()[before:], proxy.exchanges)


def stream_usage(exchange: Exchange) -> dict[str, int]:
    """The usage of a streamed message: ``message_start``'s, updated by the last
    ``message_delta``'s."""
    usage: dict[str, int] = {}
    for line in exchange.answer.decode().splitlines():
        if not line.startswith("data:"):
            continue
        event = json.loads(line.removeprefix("data:"))
        if event["type"] == "message_start":
            usage.update(event["message"]["usage"])
        elif event["type"] == "message_delta":
            usage.update(event["usage"])
    return usage


def test_claude_code_runs_a_prompt(claude_code: Path, gateway: Gateway, tmp_path: Path) -> None:
    session = run_claude(claude_code, gateway, tmp_path, MODEL)
    # One request, answered as it was sent: no retry without its system message or
    # without its deferred tools (Claude Code 2.1.3xx runs its own tool search).
    assert len(session.messages) == 1, [(e.path, e.status) for e in session.exchanges]
    first = session.messages[0].body
    assert any(m["role"] == "system" for m in first["messages"])
    deferred = [t["name"] for t in first["tools"] if t.get("defer_loading")]
    assert deferred, [t["name"] for t in first["tools"]]
    assert "ToolSearch" in [t["name"] for t in first["tools"]]
    assert "dropped the billing block" in session.log  # the gateway's debug line
    # Claude Code asks for max_tokens 32000, which does not fit next to its prompt in
    # 32768 positions: the worker cut it to what the context leaves, no error.
    assert "max_tokens 32000 cut to " in session.log, session.log[-5000:]
    assert "32000 in the completion" not in session.log, session.log[-5000:]


def test_a_second_session_reads_the_shared_prompt_from_the_cache(
    claude_code: Path, gateway: Gateway, tmp_path: Path
) -> None:
    """Two sessions in one project, with other first messages: their billing blocks
    differ, their system prompt and tools do not. The second reads from the cache all
    that comes before its first message's own text (Claude Code puts its environment
    block after that, as a system message, so the rest is new to any prefix cache)."""
    first = run_claude(claude_code, gateway, tmp_path, MODEL, "Say hello.")
    second = run_claude(claude_code, gateway, tmp_path, MODEL, "What is two and two?")
    one, two = first.messages[0].body, second.messages[0].body
    assert one["system"][0]["text"].startswith("x-anthropic-billing-header:")
    assert one["system"][0] != two["system"][0]  # a billing block for each session
    assert one["system"][1:] == two["system"][1:] and one["tools"] == two["tools"]
    # What the two prompts share: the tools, the system prompt and the first
    # message up to its own text (its system reminder), counted by the model.
    opening = two["messages"][0]["content"][:-1]
    shared = httpx.post(
        f"{gateway.base_url}/v1/messages/count_tokens",
        json={
            "model": MODEL,
            "system": two["system"],
            "tools": two["tools"],
            "messages": [{"role": "user", "content": opening}],
        },
        timeout=60,
    ).json()["input_tokens"]
    usage = stream_usage(second.messages[0])
    print(f"second session: {usage}; shared with the first: {shared} tokens")
    assert usage["cache_read_input_tokens"] >= 0.95 * shared, (usage, shared)
    assert shared >= 0.4 * usage["input_tokens"]  # the bulk of it: system and tools
    # The gateway's log says where the second one left the first's cached prompt.
    assert "left a cached prompt at token" in second.log and "in messages[0]" in second.log


def test_claude_code_retries_a_strict_overflow(
    claude_code: Path, gateway: Gateway, tmp_path: Path
) -> None:
    session = run_claude(claude_code, gateway, tmp_path, STRICT, refusals=True)
    # max_tokens_overflow: error answers the 400 in Anthropic's words; Claude Code
    # read it and asked again with less.
    assert "32000 in the completion" in session.log, session.log[-5000:]
    assert "max_tokens 32000 cut to " not in session.log, session.log[-5000:]
    statuses = [e.status for e in session.messages]
    assert statuses[0] == 400 and statuses[-1] == 200, statuses


TOOL: Any = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer"}},
        "required": ["city", "days"],
        "additionalProperties": False,
    },
}


async def test_a_streamed_tool_use_round_trip(gateway: Gateway) -> None:
    client = anthropic.AsyncAnthropic(
        base_url=gateway.base_url, api_key="unused", max_retries=0, timeout=60
    )
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Oslo?"}]
    stream = await client.messages.create(
        model=MODEL,
        max_tokens=200,
        messages=messages,
        tools=[TOOL],
        tool_choice={"type": "tool", "name": "get_weather"},
        stream=True,
    )
    events = [event async for event in stream]
    names = [e.type for e in events if e.type != "content_block_delta"]
    assert names == [
        "message_start",
        "content_block_start",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = next(e for e in events if e.type == "content_block_start")
    block = start.content_block
    assert block.type == "tool_use" and block.name == "get_weather"
    assert block.id.startswith("toolu_")
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert deltas and all(d.type == "input_json_delta" for d in deltas)
    arguments = json.loads("".join(d.partial_json for d in deltas))  # type: ignore[union-attr]
    assert set(arguments) == {"city", "days"}
    assert isinstance(arguments["city"], str) and isinstance(arguments["days"], int)
    ending = next(e for e in events if e.type == "message_delta")
    assert ending.delta.stop_reason == "tool_use"

    messages += [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": block.id, "name": block.name, "input": arguments}
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": block.id, "content": "Sunny, 21 C."}
            ],
        },
    ]
    async with client.messages.stream(
        model=MODEL, max_tokens=100, messages=messages, tools=[TOOL]
    ) as final_stream:
        final = await final_stream.get_final_message()
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert all(b.type == "text" for b in final.content)  # the answer, no new call
    first_prompt = next(e for e in events if e.type == "message_start").message.usage
    assert final.usage.input_tokens > first_prompt.input_tokens  # the result was read
    await client.close()
