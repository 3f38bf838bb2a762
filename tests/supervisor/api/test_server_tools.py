"""Tools the gateway runs (web search, web fetch) in the one tool loop, through the
official openai and anthropic SDKs, against the real app and a fake worker that
speaks the real protocol: the fake model writes the tool calls (``say`` with a
Hermes call), the gateway runs them against a SearXNG-shaped search endpoint and a
page server of this test, and the model's next round reads the results."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import httpx
import openai
import pytest
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config.tools import ToolsConfig, WebSearchConfig

from ..fakes import fake_command, fake_config
from .clients import asgi_client, strict_sdk
from .lm_app import OK, hermes_call
from .test_anthropic_api import client_for

ARTICLE = """<html><head><title>Tiny lamps</title></head><body>
<nav>Home | About | Subscribe now</nav>
<article><h1>Tiny lamps</h1><p>The brass lamp of the harbour was lit in 1887 and burns
whale oil no more.</p><p>It is kept by the town's volunteers.</p></article>
<footer>Copyright footer text</footer></body></html>"""


class _Pages(BaseHTTPRequestHandler):
    """``/search?q=…&format=json`` in SearXNG's shape, and ``/lamp``: an article."""

    searches: list[str] = []

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/search":
            query = parse_qs(url.query).get("q", [""])[0]
            self.searches.append(query)
            body = json.dumps(
                {
                    "query": query,
                    "results": [
                        {
                            "url": "https://example.org/lamps",
                            "title": "Harbour lamps",
                            "content": "A history of the harbour's brass lamp.",
                            "publishedDate": "2025-05-01T00:00:00",
                        }
                    ],
                }
            ).encode()
            kind = "application/json"
        elif url.path == "/lamp":
            body, kind = ARTICLE.encode(), "text/html; charset=utf-8"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def pages() -> Iterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadingHTTPServer(("127.0.0.1", port), _Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}"
    server.shutdown()


def _app(pages: str, **tools: Any) -> Starlette:
    config = fake_config(
        {"model_path": OK, "tool_call_parser": "hermes", "reasoning_parser": "think"}
    )
    config.tools = ToolsConfig(web_search=WebSearchConfig(searxng_url=pages), **tools)
    return create_app(config, command=fake_command)


@pytest.fixture
async def app(pages: str) -> AsyncIterator[Starlette]:
    app = _app(pages, max_rounds=3, allow_private_urls=[pages])
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(app, timeout=10.0) as client:
        yield client


@pytest.fixture
def sdk(http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return strict_sdk(http)


def search_call(query: str) -> str:
    return hermes_call("web_search", json.dumps({"query": query}))


async def test_responses_web_search_runs_and_the_model_reads_it(sdk: openai.AsyncOpenAI) -> None:
    response = await sdk.responses.create(
        model=OK,
        input=f"say {search_call('harbour lamp')}",
        tools=[{"type": "web_search"}],
        tool_choice={"type": "web_search"},
    )
    kinds = [item.type for item in response.output]
    assert kinds == ["web_search_call", "message"], kinds
    call = response.output[0]
    assert call.status == "completed"
    assert call.action.query == "harbour lamp"  # type: ignore[union-attr]
    # round 2: the fake model echoes the last message, the search's results
    assert "Harbour lamps" in response.output_text
    assert "https://example.org/lamps" in response.output_text
    assert response.status == "completed"


async def test_responses_web_search_streams_its_events(http: httpx.AsyncClient) -> None:
    body = {
        "model": OK,
        "input": f"say {search_call('lamps')}",
        "tools": [{"type": "web_search_preview"}],
        "stream": True,
    }
    async with http.stream("POST", "/v1/responses", json=body) as reply:
        assert reply.status_code == 200
        text = (await reply.aread()).decode()
    kinds = [line[len("event: ") :] for line in text.splitlines() if line.startswith("event: ")]
    searching = kinds.index("response.web_search_call.searching")
    assert kinds.index("response.web_search_call.in_progress") < searching
    assert searching < kinds.index("response.web_search_call.completed")
    assert kinds[-1] == "response.completed"


async def test_a_model_that_calls_a_tool_every_round_ends_after_max_rounds(
    sdk: openai.AsyncOpenAI,
) -> None:
    response = await sdk.responses.create(
        model=OK, input=f"repeat say {search_call('again')}", tools=[{"type": "web_search"}]
    )
    calls = [item for item in response.output if item.type == "web_search_call"]
    assert len(calls) == 3  # tools.max_rounds
    assert response.output[-1].type == "message"  # the last, tool-free round
    assert response.status == "completed"


async def test_anthropic_web_search_blocks(app: Starlette) -> None:
    async with client_for(app) as client:
        message = await client.messages.create(
            model=OK,
            max_tokens=200,
            messages=[{"role": "user", "content": f"say {search_call('brass lamp')}"}],
            tools=[{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}],
            tool_choice={"type": "tool", "name": "web_search"},
        )
    kinds = [block.type for block in message.content]
    assert kinds == ["server_tool_use", "web_search_tool_result", "text"], kinds
    use, result = message.content[0], message.content[1]
    assert use.input == {"query": "brass lamp"}  # type: ignore[union-attr]
    hits = result.content  # type: ignore[union-attr]
    assert isinstance(hits, list) and hits[0].url == "https://example.org/lamps"
    assert result.tool_use_id == use.id  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"


async def test_anthropic_web_fetch_returns_the_pages_text(app: Starlette, pages: str) -> None:
    url = f"{pages}/lamp"
    call = hermes_call("web_fetch", json.dumps({"url": url}))
    async with client_for(app) as client:
        message = await client.beta.messages.create(
            model=OK,
            max_tokens=300,
            messages=[{"role": "user", "content": f"say {call} (read {url})"}],
            tools=[{"type": "web_fetch_20250910", "name": "web_fetch"}],
            betas=["web-fetch-2025-09-10"],
        )
    blocks = [block.model_dump() for block in message.content]
    result = next(b for b in blocks if b["type"] == "web_fetch_tool_result")
    document = result["content"]["content"]
    text = document["source"]["data"]
    assert "whale oil" in text and "<p>" not in text
    assert "Subscribe now" not in text and "Copyright footer" not in text
    assert document["title"] == "Tiny lamps"


async def test_by_default_a_fetch_cannot_reach_the_gateways_own_machine(pages: str) -> None:
    app = _app(pages)  # no allow_private_urls
    url = f"{pages}/lamp"
    call = hermes_call("web_fetch", json.dumps({"url": url}))
    async with app.router.lifespan_context(app), asgi_client(app, timeout=10.0) as http:
        reply = await http.post(
            "/v1/messages",
            json={
                "model": OK,
                "max_tokens": 300,
                "messages": [{"role": "user", "content": f"say {call} {url}"}],
                "tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}],
            },
        )
    assert reply.status_code == 200
    blocks = reply.json()["content"]
    result = next(b for b in blocks if b["type"] == "web_fetch_tool_result")
    assert result["content"] == {"type": "web_fetch_tool_error", "error_code": "url_not_allowed"}


async def test_a_fetch_of_a_url_not_in_the_conversation_is_refused(
    app: Starlette, pages: str
) -> None:
    # the call's JSON writes the URL with escaped slashes: it is not in the conversation
    escaped = json.dumps({"url": f"{pages}/lamp"}).replace("/", "\\/")
    call = hermes_call("web_fetch", escaped)
    async with asgi_client(app, timeout=10.0) as http:
        reply = await http.post(
            "/v1/messages",
            json={
                "model": OK,
                "max_tokens": 300,
                "messages": [{"role": "user", "content": f"say {call}"}],
                "tools": [{"type": "web_fetch_20250910", "name": "web_fetch"}],
            },
        )
    blocks = reply.json()["content"]
    result = next(b for b in blocks if b["type"] == "web_fetch_tool_result")
    assert result["content"]["error_code"] == "url_not_allowed"


async def test_anthropic_any_tool_choice_with_only_server_tools(app: Starlette) -> None:
    async with client_for(app) as client:
        message = await client.messages.create(
            model=OK,
            max_tokens=200,
            messages=[{"role": "user", "content": f"say {search_call('lamps')}"}],
            tools=[{"type": "web_search_20250305", "name": "web_search"}],
            tool_choice={"type": "any"},
        )
    assert [block.type for block in message.content][:2] == [
        "server_tool_use",
        "web_search_tool_result",
    ]


async def test_a_server_call_after_the_round_limit_is_not_run(sdk: openai.AsyncOpenAI) -> None:
    # A client function keeps the last round's tool parsing on: the model's call of
    # the search there is dropped, not run, and the turn ends.
    weather = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    response = await sdk.responses.create(
        model=OK,
        input=f"repeat say {search_call('again')}",
        tools=[{"type": "web_search"}, weather],
    )
    calls = [item for item in response.output if item.type == "web_search_call"]
    assert len(calls) == 3  # tools.max_rounds
    assert response.status == "completed"
