"""OpenAI-side coding agents and agent SDKs, unmodified, against a whole gateway.

* Codex CLI (``@openai/codex`` from the npm registry) runs ``codex exec`` with its
  default features (namespace tools, ``web_search``) through a custom provider with
  ``wire_api = "responses"``: one turn on a real model, and one on the fake worker
  scripted to call a function of Codex's ``multi_agent_v1`` namespace, which Codex
  must run and answer.
* ``openai-agents``: an Agent with a function tool, on both its chat-completions
  and its Responses model.
* ``langchain-openai``: ``bind_tools`` with a forced tool and
  ``with_structured_output`` (json_schema).

The model is the tiny random llama with 32k positions (``tiny_lm_32k_path``: Codex's
first prompt is ~16k tokens of instructions; its chat template lists the tools by
name) whose sampled text ends after a few tokens by itself: a response cut by a
token limit is a failed turn for Codex. Forced tool calls and structured output are
grammar-constrained, so even a random model writes them correctly.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal
from urllib.parse import parse_qs, urlparse

import httpx
import pytest
from pydantic import BaseModel

from mlx_gateway.supervisor.reply import serve

from ..fixtures.npm import npm_install
from ..supervisor.live import LiveGateway
from .gateway import Gateway, fake_worker_entry
from .recording_proxy import RecordingProxy

pytestmark = pytest.mark.slow

MODEL = "tiny-agent"
SCRIPTED = "scripted"
API_KEY = "sk-agents-test"
CODEX_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / (
    "mlx-gateway-tests/codex"
)
CODEX_VERSION = os.environ.get("MLX_GATEWAY_TEST_CODEX", "0.171.0")
"""The release the test runs (the last one checked); ``latest`` tries the newest."""
NETWORK_ERRORS = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ECONNRESET", "network")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory, tiny_lm_32k_path: Path) -> Any:
    tmp = tmp_path_factory.mktemp("agents")
    gw = Gateway(
        tmp,
        [{"model_path": str(tiny_lm_32k_path), "served_model_name": MODEL, "idle_timeout": 0}],
        api_keys=[API_KEY],
    )
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A gateway whose model is the fake worker (``say <text>`` makes it write
    ``<text>``; other text is echoed), started through the ``python`` option."""
    tmp = tmp_path_factory.mktemp("scripted")
    # "reasoner" reports thinking markers and a JSON tool-call format, as a real
    # worker does for Qwen3.
    model = fake_worker_entry(tmp, "reasoner", SCRIPTED)
    search = SearchServer()
    tools = {"web_search": {"searxng_url": search.url}}
    gw = Gateway(tmp, [model], api_keys=[API_KEY], tools=tools)
    try:
        yield gw
    finally:
        gw.stop()
        search.close()


class _SearxHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        query = parse_qs(urlparse(self.path).query).get("q", [""])[0]
        hit = {"url": "https://example.org/lamps", "title": "Harbour lamps", "content": query}
        body = json.dumps({"query": query, "results": [hit]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class SearchServer:
    """A SearXNG-shaped search endpoint (``/search?q=…&format=json``) in a thread."""

    def __init__(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _SearxHandler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


# ---------------------------------------------------------------- Codex CLI


@pytest.fixture(scope="module")
def codex() -> Path:
    """The ``codex`` command, installed from the npm registry into a cache folder
    (``npm install`` again each session, which is quick once it is there)."""
    done = npm_install(CODEX_CACHE, f"@openai/codex@{CODEX_VERSION}", timeout=300, what="Codex CLI")
    binary = CODEX_CACHE / "node_modules" / ".bin" / "codex"
    if done.returncode != 0:
        if any(word in done.stderr for word in NETWORK_ERRORS):
            pytest.skip(f"the npm registry is unreachable: {done.stderr.strip()[-300:]}")
        raise RuntimeError(f"npm install @openai/codex failed:\n{done.stderr}")
    assert binary.exists(), done.stdout
    return binary


def codex_config(gateway: Any, model: str = MODEL, provider: str = "") -> str:
    """The ``config.toml`` of docs/api.md ("Codex CLI"), for this gateway (anything
    with a ``base_url``), with ``provider`` lines added to the provider's table."""
    return f"""\
model = "{model}"
model_provider = "mlx-gateway"
check_for_update_on_startup = false

[model_providers.mlx-gateway]
name = "mlx-gateway"
base_url = "{gateway.base_url}/v1"
env_key = "MLX_GATEWAY_API_KEY"
wire_api = "responses"
{provider}
[analytics]
enabled = false
"""


def codex_exec(
    codex: Path, gateway: Any, model: str, prompt: str, tmp: Path, provider: str = ""
) -> list[dict[str, Any]]:
    """Run ``codex exec --json`` through a recording proxy and check that its turn
    completed without an error and that no request of it was refused (a client that
    retries in another shape after a 4xx would pass on its exit status alone);
    returns its JSON events."""
    home, work = tmp / "codex-home", tmp / "work"
    home.mkdir()
    work.mkdir()
    target = urlparse(gateway.base_url)
    proxy = RecordingProxy(target.hostname or "127.0.0.1", target.port or 80)
    (home / "config.toml").write_text(codex_config(proxy, model, provider))
    env = {**os.environ, "CODEX_HOME": str(home), "MLX_GATEWAY_API_KEY": API_KEY}
    started = time.monotonic()
    try:
        done = subprocess.run(
            [str(codex), "exec", "--skip-git-repo-check", "--json", prompt],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=150,
        )
    finally:
        proxy.close()
    print(f"codex exec on {model} took {time.monotonic() - started:.1f} s")
    proxy.assert_none_refused()
    assert any(e.path.startswith("/v1/responses") for e in proxy.exchanges)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    report = f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, report
    kinds = [e["type"] for e in events]
    assert "turn.completed" in kinds, report
    assert "turn.failed" not in kinds and "error" not in kinds, report
    # Codex reports its own notices as error items; the only one allowed is that it
    # has no metadata (context window, …) for a model name it does not know.
    notices = [
        e["item"]["message"]
        for e in events
        if e["type"] == "item.completed" and e["item"]["type"] == "error"
    ]
    assert all(n.startswith(f"Model metadata for `{model}` not found") for n in notices), report
    return events


def answers(events: list[dict[str, Any]]) -> list[str]:
    return [
        e["item"]["text"]
        for e in events
        if e["type"] == "item.completed" and e["item"]["type"] == "agent_message"
    ]


def test_codex_exec_runs_a_turn(gateway: Gateway, codex: Path, tmp_path: Path) -> None:
    events = codex_exec(codex, gateway, MODEL, "Say hello.", tmp_path)
    assert len(answers(events)) <= 1  # Codex shows no item for an empty answer
    usage = next(e["usage"] for e in events if e["type"] == "turn.completed")
    assert usage["input_tokens"] > 4000  # its instructions reached the model
    assert usage["output_tokens"] >= 1
    # Its default tools: a namespace (flattened) and web_search, which the gateway
    # runs itself now (test_codex_gets_a_web_search_run_by_the_gateway).
    assert "leaving out the 'web_search' tool" not in gateway.log()


def test_codex_runs_a_call_of_a_namespace_function(
    scripted: Gateway, codex: Path, tmp_path: Path
) -> None:
    # The model thinks, then calls close_agent of Codex's multi_agent_v1 namespace by
    # its flat name; Codex gets name and namespace apart, runs it (no such agent: an
    # error result naming the id), and sends the whole history back (the reasoning
    # item and the call with its namespace, then the result); the fake model
    # echoes the result.
    call = {"name": "multi_agent_v1__close_agent", "arguments": {"target": "nobody"}}
    prompt = f"say <think>plan it</think><tool_call>\n{json.dumps(call)}\n</tool_call>"
    events = codex_exec(codex, scripted, SCRIPTED, prompt, tmp_path)
    (answer,) = answers(events)
    # A name Codex could not route would come back as "unsupported call: …".
    assert "unsupported call" not in answer
    assert "nobody" in answer
    usage = next(e["usage"] for e in events if e["type"] == "turn.completed")
    assert usage["reasoning_output_tokens"] > 0


def test_codex_stays_connected_through_a_prefill_longer_than_its_watchdog(
    codex: Path, tmp_path: Path
) -> None:
    """Codex aborts a stream after ``stream_idle_timeout_ms`` without an SSE event
    (300 s by default; SSE comments do not count: with comments only, this turn
    fails with "idle timeout waiting for SSE"). The gateway's repeated
    ``response.in_progress`` keeps it: here a 6-s watchdog, a 12-s prefill (the fake
    worker's ``prefill``), and the API's event every 2 s instead of 30."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(serve, "API_EVENT_SECONDS", 2.0)
        with LiveGateway({"model_path": "fake/ok"}, stream_keepalive=1.0) as gw:
            events = codex_exec(
                codex,
                SimpleNamespace(base_url=gw.url),
                "fake/ok",
                "prefill 12 hello there",
                tmp_path,
                provider="stream_idle_timeout_ms = 6000\nstream_max_retries = 0\n",
            )
    assert answers(events) == ["prefill 12 hello there "]
    assert not [e for e in events if e["type"] == "error"]


# ---------------------------------------------------------------- agent SDKs


def test_openai_agents_runs_a_function_tool(gateway: Gateway) -> None:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        ToolCallOutputItem,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # no uploads of traces to OpenAI
    calls: list[str] = []

    @function_tool
    def get_weather(unit: Literal["C", "F"]) -> str:
        """Today's weather."""
        calls.append(unit)
        return f"21 degrees {unit}"

    client = AsyncOpenAI(base_url=f"{gateway.base_url}/v1", api_key=API_KEY, max_retries=0)
    models = [
        OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
        OpenAIResponsesModel(model=MODEL, openai_client=client),
    ]
    for model in models:
        calls.clear()
        agent = Agent(
            name="weather",
            instructions="Answer with the weather tool.",
            tools=[get_weather],
            model=model,
            # Forced: the gateway constrains the call with a grammar. The SDK resets
            # the choice after the call, so the run ends with a text answer.
            model_settings=ModelSettings(tool_choice="get_weather"),
        )
        result = Runner.run_sync(agent, "What is the weather?", max_turns=4)
        assert len(calls) == 1 and calls[0] in ("C", "F"), type(model).__name__
        outputs = [i for i in result.new_items if isinstance(i, ToolCallOutputItem)]
        assert [o.output for o in outputs] == [f"21 degrees {calls[0]}"]
        assert isinstance(result.final_output, str)


class Forecast(BaseModel):
    unit: Literal["C", "F"]
    rainy: bool


@pytest.mark.parametrize("responses_api", [False, True], ids=["chat", "responses"])
def test_langchain_tools_and_structured_output(gateway: Gateway, responses_api: bool) -> None:
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(unit: Literal["C", "F"]) -> str:
        """Today's weather."""
        return f"21 degrees {unit}"

    llm = ChatOpenAI(
        model=MODEL,
        base_url=f"{gateway.base_url}/v1",
        api_key=API_KEY,  # type: ignore[arg-type]
        max_retries=0,
        use_responses_api=responses_api,
    )
    message = llm.bind_tools([get_weather], tool_choice="get_weather").invoke("Weather?")
    assert isinstance(message, AIMessage)
    (call,) = message.tool_calls
    assert call["name"] == "get_weather" and call["args"]["unit"] in ("C", "F")
    assert get_weather.invoke(call["args"]).startswith("21 degrees")

    forecast = llm.with_structured_output(Forecast, method="json_schema").invoke("Forecast?")
    assert isinstance(forecast, Forecast)


def test_a_prompt_beyond_the_context_names_input(gateway: Gateway) -> None:
    body = {"model": MODEL, "input": "hello world " * 40000, "max_output_tokens": 8}
    r = httpx.post(
        f"{gateway.base_url}/v1/responses",
        json=body,
        headers={"Authorization": f"Bearer {API_KEY}"},
        timeout=60,
    )
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["param"], error["code"]) == ("input", "context_length_exceeded")
    assert "input" in error["message"] and "messages" not in error["message"]


def test_codex_gets_a_web_search_run_by_the_gateway(
    scripted: Gateway, codex: Path, tmp_path: Path
) -> None:
    # Codex sends {"type": "web_search"} with every turn; the fake model calls it,
    # the gateway asks the search endpoint, Codex sees the web_search_call item, and
    # the model's next round (an echo of the results) is the answer.
    call = {"name": "web_search", "arguments": {"query": "harbour lamps"}}
    prompt = f"say <tool_call>\n{json.dumps(call)}\n</tool_call>"
    events = codex_exec(codex, scripted, SCRIPTED, prompt, tmp_path)
    items = [e["item"] for e in events if e["type"] == "item.completed"]
    searches = [item for item in items if item["type"] == "web_search"]
    assert searches and searches[0]["query"] == "harbour lamps", items
    assert any("Harbour lamps" in answer for answer in answers(events)), items
