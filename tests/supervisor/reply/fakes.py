"""Scripted fakes under the reply layer: a model handle whose "worker" answers each
generation from a script (its chunks, a tool call in Hermes's format, a rejection,
a crash), a registry with real routes over such handles, MCP servers that answer
from a script, and a dialect (``/v1/say``, as docs/design.md writes one) whose
frames and body are the turn's events as plain JSON.

Everything between the dialect and the worker is the real code: the serve, the
route choice, the opening, the tool loop, the turn and its parsers, the generation
and its worker call. The app and the state these are put on are built in one place,
:mod:`.gateway`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mlx_gateway.protocol.messages import Chunk, Done, Generate, Started, Usage
from mlx_gateway.supervisor.config.routes import RouteConfig
from mlx_gateway.supervisor.config.tools import ToolsConfig
from mlx_gateway.supervisor.engine.requests import SamplingFields
from mlx_gateway.supervisor.errors import GatewayError, WorkerCrashed
from mlx_gateway.supervisor.pool.routes import Route, RouteTable
from mlx_gateway.supervisor.pool.status import ModelStatus
from mlx_gateway.supervisor.reply.serve import (
    ChoiceReply,
    Finished,
    ReasoningDelta,
    ServerToolApproval,
    ServerToolCall,
    ServerToolResult,
    ServerToolsListed,
    TextDelta,
    TextModel,
    ToolCallMade,
)
from mlx_gateway.supervisor.tools.results import McpTool, ToolOutput

from ..api.fakes import FakeHandle, FakeRegistry
from ..api.lm_app import hermes_call

# ---------------------------------------------------------------- the worker


def said(text: str) -> tuple[str, ...]:
    """``text`` as the worker's chunks: one word (one token) each."""
    words = text.split(" ")
    return tuple(f"{w} " if i < len(words) - 1 else w for i, w in enumerate(words))


def called(name: str, **arguments: Any) -> tuple[str, ...]:
    """A tool call in Hermes's format, as three chunks (three tokens): its opening
    marker, its JSON, its closing marker."""
    text = hermes_call(name, json.dumps(arguments))
    head, body, tail = text.split("\n")
    return f"{head}\n", f"{body}\n", tail


@dataclass(frozen=True)
class Round:
    """One generation as the scripted worker answers it: ``pieces`` are its chunks,
    a token each, cut where the request's ``max_tokens`` ends it (``length``, as a
    worker does); ``reject`` is raised instead of starting it (the worker's 400),
    ``crash_after`` kills "the worker" after that many chunks."""

    pieces: tuple[str, ...] = ()
    prompt_tokens: int = 7
    reject: GatewayError | None = None
    crash_after: int | None = None
    gate: asyncio.Event | None = None
    """Once started, wait for this before the first chunk (one never set: the
    generation runs until it is cancelled)."""


@dataclass
class ScriptedHandle(FakeHandle):
    """A model whose worker answers its generations from ``script``, one
    :class:`Round` each, in order; ``state`` is what its status says (``ready``:
    loaded)."""

    script: list[Round] = field(default_factory=list)
    state: str = "ready"

    def status(self) -> ModelStatus:
        return ModelStatus(state=self.state, pid=123, inflight=self.inflight, context_length=4096)

    async def generate(self, msg: Generate) -> AsyncIterator[Any]:
        self.sent.append(msg)
        assert self.script, f"{self.name}: a generation more than scripted ({msg.request_id})"
        round_ = self.script.pop(0)
        if round_.reject is not None:
            raise round_.reject
        done = False
        try:
            yield Started(request_id=msg.request_id, prompt_tokens=round_.prompt_tokens)
            self.started.set()
            if round_.gate is not None:
                await round_.gate.wait()
            limit = msg.sampling.max_tokens
            sent = 0
            for piece in round_.pieces:
                if limit is not None and sent >= limit:
                    break
                if round_.crash_after is not None and sent == round_.crash_after:
                    raise WorkerCrashed(f"model '{self.name}' worker killed by SIGKILL")
                yield Chunk(request_id=msg.request_id, text=piece, tokens=1)
                sent += 1
            reason = "length" if limit is not None and sent >= limit else "stop"
            usage = Usage(prompt_tokens=round_.prompt_tokens, completion_tokens=sent)
            done = True
            yield Done(request_id=msg.request_id, finish_reason=reason, usage=usage)
        finally:
            (self.finished if done else self.cancelled).append(msg.request_id)


def seen(msg: Generate) -> list[dict[str, Any]]:
    """The conversation a generation was sent (what the model read)."""
    return list(msg.messages or [])


def offered(msg: Generate) -> list[str]:
    """The names of the tools a generation's chat template was given."""
    return [tool["function"]["name"] for tool in msg.chat_template_kwargs.get("tools", [])]


class ScriptedRegistry(FakeRegistry):
    """The API tests' in-process registry, with real routes over its handles."""

    def __init__(self, *handles: ScriptedHandle, routes: Sequence[RouteConfig] = ()) -> None:
        super().__init__(*handles)
        self.routes = RouteTable(routes, {h.name: h for h in handles})

    def route(self, name: str) -> Route[FakeHandle] | None:
        # as the real registry: a model's name is never a route's
        return None if self.lookup(name) is not None else self.routes.find(name)

    def visible_routes(self) -> list[Route[FakeHandle]]:
        return self.routes.routes


# ---------------------------------------------------------------- MCP servers

Answer = Callable[[str, dict[str, Any]], Awaitable[ToolOutput]]


async def echo(name: str, arguments: dict[str, Any]) -> ToolOutput:
    """A tool's answer: its name and arguments."""
    return ToolOutput(text=f"{name} {json.dumps(arguments, sort_keys=True)}")


def tool(name: str, description: str = "") -> McpTool:
    schema = {"type": "object", "properties": {"x": {"type": "string"}}}
    return McpTool(name=name, description=description or f"The {name} tool.", input_schema=schema)


@dataclass
class FakeMcpServer:
    """An MCP server that lists ``tools`` (or fails with ``list_error``) and answers
    each call with ``answer``; it counts as started once its tools were listed."""

    tools: list[McpTool] = field(default_factory=lambda: [tool("now")])
    answer: Answer = echo
    list_error: Exception | None = None
    url: str | None = None
    url_check: Callable[[str], Awaitable[None]] | None = None
    listings: int = 0
    calls: list[tuple[str, dict[str, Any], str | None]] = field(default_factory=list)
    closed: bool = False

    @property
    def started(self) -> bool:
        return self.listings > 0

    async def list_tools(self) -> list[McpTool]:
        if self.url_check is not None and self.url is not None:
            await self.url_check(self.url)  # as the real server, before it connects
        self.listings += 1
        if self.list_error is not None:
            raise self.list_error
        return self.tools

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *, caller: str | None = None
    ) -> ToolOutput:
        self.calls.append((name, arguments or {}, caller))
        return await self.answer(name, arguments or {})

    async def close(self) -> None:
        self.closed = True


@dataclass
class FakeMcp:
    """The gateway's MCP servers (``tools.mcp_servers`` by label) and the servers a
    request names by URL (``by_url``: made when a request names one)."""

    servers: dict[str, FakeMcpServer] = field(default_factory=dict)
    config: ToolsConfig = field(default_factory=ToolsConfig)
    """The config's ``tools`` (set by the gateway the tests build)."""
    by_url: dict[str, FakeMcpServer] = field(default_factory=dict)
    made: list[FakeMcpServer] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        return list(self.servers)

    def get(self, label: str) -> FakeMcpServer | None:
        return self.servers.get(label)

    def adhoc(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        *,
        url_check: Callable[[str], Awaitable[None]],
        label: str = "adhoc",
    ) -> FakeMcpServer:
        server = self.by_url.get(url) or FakeMcpServer()
        server.url, server.url_check = url, url_check
        self.made.append(server)
        return server


# ---------------------------------------------------------------- the dialect


class SayRequest(SamplingFields, kw_only=True):
    """``POST /v1/say``: one user message, and the server tools named by kind."""

    text: str
    functions: list[str] = []
    """Client functions offered (the client runs them)."""
    mcp: list[str] = []
    """The config's MCP servers, by label."""
    mcp_urls: list[str] = []
    """MCP servers named by URL."""
    web_search: bool = False
    web_fetch: bool = False
    ollama: bool = False
    """Answer as Ollama's dialect does: NDJSON lines, a whole answer without padding."""


class Transcript(ChoiceReply):
    """Each turn event as one JSON object: one SSE data line each when streamed,
    the list of them (after the model's name and the request id) when whole."""

    def __init__(self, ollama: bool = False) -> None:
        self.rows: list[dict[str, Any]] = []
        self.ndjson = ollama
        self.padded = not ollama

    def begin(self, model: TextModel, request_id: str) -> None:
        self.rows = [{"model": model.name, "id": request_id}]

    def on(self, event: Any) -> bytes | None:
        row = as_row(event)
        self.rows.append(row)
        line = json.dumps(row)
        return f"{line}\n".encode() if self.ndjson else f"data: {line}\n\n".encode()

    def body(self) -> list[dict[str, Any]]:
        return self.rows


def as_row(event: Any) -> dict[str, Any]:
    match event:
        case TextDelta(text=text):
            return {"text": text}
        case ReasoningDelta(text=text):
            return {"reasoning": text}
        case ToolCallMade(name=name, arguments=arguments):
            return {"client_call": name, "arguments": arguments}
        case ServerToolsListed(server_label=label, tools=tools, error=error):
            return {"listed": label, "tools": [t.name for t in tools], "error": error}
        case ServerToolCall(tool=called_tool, arguments=arguments):
            return {"server_call": called_tool.name, "arguments": arguments}
        case ServerToolResult(tool=ran, outcome=outcome):
            return {"result": ran.name, "text": outcome.text, "is_error": outcome.is_error}
        case ServerToolApproval(tool=waiting):
            return {"approval": waiting.name}
        case Finished(reason=reason, usage=usage):
            return {
                "finish": reason,
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
            }
    raise AssertionError(f"an event the transcript does not know: {event!r}")
