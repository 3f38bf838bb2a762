"""Tools the gateway runs itself (web search, web fetch, the tools of MCP servers),
in the engine's words: what a surface asked for (:class:`ServerToolSpec`, pure
data made by the surface's dialect), the runnable tool the serve made of it
(:class:`ServerTool`: a function the model sees, and how to run a call of it), and
the two turn events a run adds to a turn's stream (:class:`ServerToolCall`,
:class:`ServerToolResult`), which each surface writes in its own shape.

The loop that runs them between the model's rounds is :mod:`...reply.tool_loop`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from mlx_gateway.supervisor.engine.parsers.tool_calls import Function

ToolKind = Literal["web_search", "web_fetch", "mcp", "tool_search"]

SEPARATOR = "__"
"""Between a group's name and a member's in the flat name the model sees: an MCP
server's label and its tool (``time__get_current_time``), a Responses namespace and
its function (``agents__spawn``); a plain identifier that every tool-call format
writes."""


@dataclass(frozen=True)
class ServerToolSpec:
    """A server tool as a request asks for it, before anything is looked up."""

    kind: ToolKind
    type: str = ""
    """The surface's own name of the tool's type (``web_search_20250305``,
    ``web_search_preview``, ``mcp``), echoed in its output."""
    name: str = ""
    """The name the surface gives the tool (Anthropic's ``name``); for MCP the
    server's label."""
    server_url: str | None = None
    """An MCP server named by the request (``None``: the config's server of the label)."""
    headers: dict[str, str] = field(default_factory=dict)
    allowed_tools: list[str] | None = None
    """An MCP server's tools the model may call (``None``: all)."""
    require_approval: str = "never"
    """``never``, or ``always`` (a call waits for the client's approval)."""
    max_uses: int | None = None
    allowed_domains: list[str] = field(default_factory=list)
    blocked_domains: list[str] = field(default_factory=list)
    deferred: list[Function] = field(default_factory=list)
    """The tools a ``tool_search`` finds: the request's ``defer_loading`` tools,
    not rendered into the prompt until found (:mod:`.tool_search`)."""


@dataclass(frozen=True)
class ToolOutcome:
    """What running a call gave: ``text`` for the model, ``is_error`` when it failed
    (the model is told, the turn goes on), ``data`` for the surface's output item
    (search hits, a fetched page, an MCP result, the tools a search loaded)."""

    text: str
    is_error: bool = False
    data: Any = None
    loaded: tuple[Function, ...] = ()
    """Deferred tools a search found: offered to the model from the next round on."""


@dataclass(frozen=True)
class ServerTool:
    """A runnable server tool: the function the model sees and how to run it."""

    function: Function
    spec: ServerToolSpec
    run: Callable[[dict[str, Any]], Awaitable[ToolOutcome]]
    tool_name: str = ""
    """The tool's own name (an MCP server's, without the label); the function's name
    for the built-in tools."""

    @property
    def name(self) -> str:
        return self.function.name


@dataclass(frozen=True)
class ServerToolCall:
    """The model called a server tool: it runs now (``arguments``: JSON text)."""

    id: str
    tool: ServerTool
    arguments: str


@dataclass(frozen=True)
class ServerToolResult:
    """A server tool call ended (``outcome.is_error``: it failed, and the model was told)."""

    id: str
    tool: ServerTool
    arguments: dict[str, Any]
    outcome: ToolOutcome


@dataclass(frozen=True)
class ServerToolsListed:
    """The tools an MCP server offers, listed before the first round (the Responses
    API's ``mcp_list_tools`` item)."""

    server_label: str
    tools: list[ServerTool]
    error: str | None = None


@dataclass(frozen=True)
class ServerToolApproval:
    """A call that waits for the client's approval (``require_approval``): it does
    not run, and the turn ends; the client answers in its next request."""

    id: str
    tool: ServerTool
    arguments: str


@dataclass(frozen=True)
class ApprovedCall:
    """A client's answer to an approval request: the call to run (or not) before
    the model's first round, by the name the model called it."""

    id: str
    name: str
    arguments: str
    approve: bool
    reason: str | None = None
