"""The ``tools:`` section: the tools the gateway runs itself between two rounds of a
model (docs/tools.md): MCP servers, web search and fetch, and their limits.

``mcp_servers`` entries have the shape of a Claude or Cursor ``mcp.json``
``mcpServers`` entry, so that a user's file pastes in: ``{command, args, env}`` for a
server run over stdio, ``{url, headers}`` for one reached over streamable HTTP.
``mcp_config`` names such a file, whose servers are read at load (:mod:`.mcp_json`);
an entry of ``mcp_servers`` wins over the file's entry of the same label.

The shapes are checked key by key in :mod:`.mcp_json` before msgspec decodes them,
so that an error names the key and its line. No I/O here.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

_PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]
_Url = Annotated[str, msgspec.Meta(pattern=r"^https?://[^\s/]+")]
_NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]

MIB = 1024 * 1024


class WebSearchConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``tools.web_search``: where a web search goes and how much it brings back."""

    searxng_url: _Url | None = None
    """A SearXNG instance's base URL (asked at ``/search?q=…&format=json``); ``None``:
    the built-in metasearch library."""
    max_results: Annotated[int, msgspec.Meta(ge=1, le=20)] = 5
    """Results a search hands the model."""
    timeout: Annotated[float, msgspec.Meta(gt=0, le=120)] = 10.0
    """Seconds a search may take before it fails."""


class FetchConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``tools.fetch``: the limits of a web fetch."""

    max_bytes: Annotated[int, msgspec.Meta(ge=1024, le=64 * MIB)] = 5 * MIB
    """Most bytes of a page read (the rest is cut off)."""
    timeout: Annotated[float, msgspec.Meta(gt=0, le=300)] = 15.0
    """Seconds a fetch may take, redirects included."""


class McpServerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One MCP server (an entry of ``tools.mcp_servers`` or of an ``mcp.json``'s
    ``mcpServers``): exactly one of ``command`` (stdio) and ``url`` (streamable HTTP)."""

    command: _NonEmpty | None = None
    """The program of a stdio server (``uvx``, ``npx``, a path), started on first use
    and stopped after ``tools.mcp_idle_timeout`` without calls."""
    args: list[str] = []
    env: dict[str, str] = {}
    """Environment variables set for the server, over a minimal inherited environment
    (``PATH``, ``HOME``, ``USER``, ``SHELL``, ``TERM``, ``LOGNAME``)."""
    cwd: str | None = None
    """The server's working directory (relative: from the config file's folder)."""
    url: _Url | None = None
    """A streamable HTTP server's endpoint (usually ending in ``/mcp``)."""
    headers: dict[str, str] = {}
    """Headers sent with every request to ``url`` (``Authorization: Bearer …``)."""
    timeout: _PositiveSeconds | None = None
    """Seconds one call may take; ``None``: ``tools.mcp_timeout``."""
    disabled: bool = False
    """``true``: listed in the file but not served (as in Claude's and Cline's files)."""

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"


class ToolsConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ``tools:`` section."""

    max_rounds: Annotated[int, msgspec.Meta(ge=1)] = 8
    """Model runs of one request that may call server tools; then a last, tool-free run
    answers."""
    allow_private_urls: bool | list[_NonEmpty] = False
    """Let per-request MCP server URLs and fetches reach loopback, link-local and
    private addresses: ``true`` for all, or a list of the URLs allowed. URLs written in
    this file (``searxng_url``, an MCP server's ``url``) are always trusted."""
    web_search: WebSearchConfig = msgspec.field(default_factory=WebSearchConfig)
    fetch: FetchConfig = msgspec.field(default_factory=FetchConfig)
    mcp_servers: dict[str, McpServerConfig] = {}
    """The MCP servers by label (after load: ``mcp_config``'s merged in, ``disabled``
    ones left out)."""
    mcp_config: str | None = None
    """A Claude or Cursor ``mcp.json`` whose ``mcpServers`` are served too (absolute
    after load)."""
    mcp_idle_timeout: Annotated[float, msgspec.Meta(ge=0)] = 300.0
    """Seconds a stdio server (or an HTTP server's session) is kept without calls;
    0: kept until the gateway stops."""
    mcp_timeout: _PositiveSeconds = 60.0
    """Seconds an MCP call (starting the server included) may take before it fails."""
