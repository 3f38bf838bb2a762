"""Usage rows through the official clients against a real gateway (fake workers over
real ZeroMQ): each surface's row holds the usage its client received (streamed and
whole), the rows survive a restart, ``GET /v1/usage`` groups them by key, model,
kind and day and filters them by time, ``mlx-gateway usage`` prints them, and
``/metrics`` has the per-key series."""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from mlx_gateway.supervisor.cli import main

from ..api.clients import realtime_text_turn
from ..live import LiveGateway

pytestmark = pytest.mark.slow

MODEL = "fake/ok"
PARSERS = {"tool_call_parser": "hermes", "reasoning_parser": "think"}


def say(text: str) -> list[Any]:
    return [{"role": "user", "content": f"say {text}"}]


def usage_of(url: str, **params: str) -> dict[str, Any]:
    reply = httpx.get(f"{url}/v1/usage", params=params, timeout=30)
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def by(rows: list[dict[str, Any]], field: str) -> dict[str, dict[str, Any]]:
    return {row[field]: row for row in rows}


def ask_every_surface(url: str) -> dict[str, tuple[int, int, int]]:
    """One request per kind (whole and streamed where the API streams): the
    requests, input and output tokens each client was told, summed per kind."""
    told: dict[str, list[tuple[int, int]]] = {}
    with (
        openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as sdk,
        anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0) as claude,
    ):
        _openai(sdk, told)
        _anthropic(claude, told)
    with ollama.Client(host=url) as olla:
        answer = olla.chat(model=MODEL, messages=say("ollama"))
        parts = list(olla.generate(model=MODEL, prompt="say generated", stream=True))
    told["ollama"] = [(answer.prompt_eval_count or 0, answer.eval_count or 0)]
    told["ollama"].append((parts[-1].prompt_eval_count or 0, parts[-1].eval_count or 0))
    return {
        kind: (len(pairs), sum(p for p, _ in pairs), sum(c for _, c in pairs))
        for kind, pairs in told.items()
    }


def _openai(sdk: openai.OpenAI, told: dict[str, list[tuple[int, int]]]) -> None:
    chat = sdk.chat.completions.create(model=MODEL, messages=say("hello there"))
    assert chat.usage is not None
    told.setdefault("chat", []).append((chat.usage.prompt_tokens, chat.usage.completion_tokens))
    stream = sdk.chat.completions.create(
        model=MODEL,
        messages=say("streamed words here"),
        stream=True,
        stream_options={"include_usage": True},
    )
    last = [chunk.usage for chunk in stream if chunk.usage is not None][-1]
    told["chat"].append((last.prompt_tokens, last.completion_tokens))
    two = sdk.chat.completions.create(model=MODEL, messages=say("two of them"), n=2)
    assert two.usage is not None and len(two.choices) == 2
    told["chat"].append((two.usage.prompt_tokens, two.usage.completion_tokens))
    text = sdk.completions.create(model=MODEL, prompt="say a raw prompt")
    assert text.usage is not None
    told["completions"] = [(text.usage.prompt_tokens, text.usage.completion_tokens)]
    response = sdk.responses.create(model=MODEL, input="say responses")
    assert response.usage is not None
    told["responses"] = [(response.usage.input_tokens, response.usage.output_tokens)]
    with sdk.responses.stream(model=MODEL, input="say streamed response") as events:
        final = events.get_final_response()
    assert final.usage is not None
    told["responses"].append((final.usage.input_tokens, final.usage.output_tokens))


def _anthropic(claude: anthropic.Anthropic, told: dict[str, list[tuple[int, int]]]) -> None:
    message = claude.messages.create(model=MODEL, max_tokens=64, messages=say("anthropic"))
    told["anthropic"] = [(message.usage.input_tokens, message.usage.output_tokens)]
    with claude.messages.stream(model=MODEL, max_tokens=64, messages=say("streamed")) as s:
        streamed = s.get_final_message()
    told["anthropic"].append((streamed.usage.input_tokens, streamed.usage.output_tokens))


def test_rows_match_what_the_clients_got_and_survive_a_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "usage.sqlite3"
    with LiveGateway({"model_path": MODEL, **PARSERS}, usage_path=str(path)) as gw:
        told = ask_every_surface(gw.url)
        kinds = by(usage_of(gw.url, group_by="kind")["data"], "kind")
        metrics = httpx.get(f"{gw.url}/metrics").text
    for kind, (requests, input_tokens, output_tokens) in told.items():
        row = kinds[kind]
        assert (row["requests"], row["input_tokens"], row["output_tokens"]) == (
            requests,
            input_tokens,
            output_tokens,
        ), (kind, row)
        assert row["errors"] == 0 and row["duration"] > 0
    assert input_tokens > 0 and output_tokens > 0
    total_requests = sum(r for r, _, _ in told.values())
    total_output = sum(o for _, _, o in told.values())
    assert (
        'mlx_gateway_key_requests_total{key="anonymous",model="fake/ok",kind="chat",status="200"} 3'
        in metrics
    )
    assert (
        f'mlx_gateway_key_output_tokens_total{{key="anonymous",model="fake/ok"}} {total_output}'
        in (metrics)
    )

    # A new gateway on the same file: the rows are there, grouped every way.
    with LiveGateway({"model_path": MODEL}, usage_path=str(path)) as gw:
        (total,) = usage_of(gw.url)["data"]
        assert total["requests"] == total_requests
        assert total["output_tokens"] == total_output
        today = datetime.datetime.now(datetime.UTC).date().isoformat()
        rows = usage_of(gw.url, group_by="key,model,day")["data"]
        assert [(r["key"], r["model"], r["day"], r["requests"]) for r in rows] == [
            ("anonymous", MODEL, today, total_requests)
        ]
        # time ranges: ISO dates (an end date includes its day) and Unix seconds
        assert usage_of(gw.url, start=today, end=today)["data"][0]["requests"] == total_requests
        later = str(time.time() + 60)
        assert usage_of(gw.url, start=later)["data"] == []
        assert usage_of(gw.url, end="2000-01-01")["data"] == []
        assert usage_of(gw.url, kind="ollama")["data"][0]["requests"] == told["ollama"][0]
        bad = httpx.get(f"{gw.url}/v1/usage", params={"group_by": "week"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "group_by"
        bad = httpx.get(f"{gw.url}/v1/usage", params={"start": "yesterday"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "start"

        # the terminal: a table, and the same rows as JSON
        assert main(["usage", "--url", gw.url, "--group-by", "kind"]) == 0
        table = capsys.readouterr().out
        assert table.splitlines()[0].split()[:3] == ["KIND", "REQUESTS", "INPUT"]
        assert any(line.split()[:2] == ["anthropic", "2"] for line in table.splitlines())
        assert main(["usage", "--url", gw.url, "--group-by", "model", "--json"]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert printed["data"][0]["model"] == MODEL


def test_a_realtime_response_and_a_tool_loop_are_counted_as_their_clients_were_told(
    tmp_path: Path,
) -> None:
    """A Realtime response (no HTTP request: its session records it) and a chat
    answer whose server tool ran between two rounds (their usage added up)."""
    import asyncio

    from mlx_gateway.supervisor.config.tools import McpServerConfig, ToolsConfig

    from ..fakes import fake_config

    server = str(Path(sys.executable).with_name("mcp-server-time"))
    config = fake_config(
        {"model_path": MODEL, "server_tools": ["time"], **PARSERS},
        usage_path=str(tmp_path / "usage.sqlite3"),
    )
    config.tools = ToolsConfig(mcp_servers={"time": McpServerConfig(command=server)})
    call = '<tool_call>{"name": "time__get_current_time", "arguments": {"timezone": "UTC"}}'
    call += "</tool_call>"

    async def realtime(url: str) -> Any:
        return (await realtime_text_turn(url, MODEL, "say hello realtime")).usage

    with LiveGateway(config=config) as gw:
        said = asyncio.run(realtime(gw.url))
        with openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0) as sdk:
            tooled = sdk.chat.completions.create(model=MODEL, messages=say(call))
        kinds = by(usage_of(gw.url, group_by="kind")["data"], "kind")
    assert said is not None and said.output_tokens > 0
    row = kinds["realtime"]
    assert (row["requests"], row["input_tokens"], row["output_tokens"], row["errors"]) == (
        1,
        said.input_tokens,
        said.output_tokens,
        0,
    )
    assert tooled.usage is not None
    assert "datetime" in (tooled.choices[0].message.content or "")  # the second round's
    row = kinds["chat"]
    assert (row["input_tokens"], row["output_tokens"]) == (
        tooled.usage.prompt_tokens,
        tooled.usage.completion_tokens,
    )
