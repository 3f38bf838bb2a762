"""From the server tools a request asks for (:class:`ServerToolSpec`) to runnable
tools (:class:`ServerTool`): web search (the config's SearXNG instance, else a
metasearch library), web fetch (only URLs that appear in the conversation), tool
search (over the request's deferred tools, :mod:`...engine.tool_search`), and
the tools of MCP servers (the config's, by label, or one the request names,
checked by the URL rules of ``tools.allow_private_urls``).

The model sees each as a function: ``web_search {query}``, ``web_fetch {url}``
(its ``url`` constrained to the conversation's URLs), ``tool_search {pattern}`` or
``{query}``, ``<label>__<tool>`` with the MCP tool's own input schema.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Sequence
from typing import Any

from mlx_gateway.supervisor.config.tools import ToolsConfig
from mlx_gateway.supervisor.engine.parsers.tool_calls import Function
from mlx_gateway.supervisor.engine.server_tools import (
    SEPARATOR,
    ServerTool,
    ServerToolsListed,
    ServerToolSpec,
    ToolOutcome,
)
from mlx_gateway.supervisor.engine.tool_search import NAME as TOOL_SEARCH
from mlx_gateway.supervisor.engine.tool_search import found_text, is_regex, matching, spec_function
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http.caller import ANONYMOUS, Caller
from mlx_gateway.supervisor.tools import McpServer, McpServers, McpTool
from mlx_gateway.supervisor.tools.safety import check_url
from mlx_gateway.supervisor.tools.web_fetch import fetch, is_listed, urls_in
from mlx_gateway.supervisor.tools.web_search import SearchFailed, search

logger = logging.getLogger(__name__)

SEARCH_PARAMETERS = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "What to search the web for."}},
    "required": ["query"],
}


def _texts(messages: Sequence[dict[str, Any]]) -> list[str]:
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [p.get("text", "") for p in content if isinstance(p, dict)]
    return out


class ToolMaker:
    """Makes the runnable tools of one request."""

    def __init__(self, mcp: McpServers, caller: Caller = ANONYMOUS) -> None:
        self.config: ToolsConfig = mcp.config
        self.mcp = mcp
        self.caller = caller
        self.key_name = caller.name
        self.listed: list[ServerToolsListed] = []
        self.adhoc: list[McpServer] = []
        """The servers this request named by URL: closed when it ends (:meth:`aclose`)."""

    async def make(
        self, specs: Sequence[ServerToolSpec], messages: Sequence[dict[str, Any]]
    ) -> dict[str, ServerTool]:
        self._check_scope(specs)  # before any server is started
        tools: dict[str, ServerTool] = {}
        for spec in specs:
            if spec.kind == "web_search":
                made = [self._search(spec)]
            elif spec.kind == "web_fetch":
                made = [self._fetch(spec, messages)]
            elif spec.kind == "tool_search":
                made = [self._tool_search(spec)]
            else:
                made = await self._mcp(spec)
            for tool in made:
                tools[tool.name] = tool
        return tools

    def _check_scope(self, specs: Sequence[ServerToolSpec]) -> None:
        """A 400 for a web tool or an MCP URL outside the caller's ``tools``, worded as
        for a tool the gateway does not run (a config server outside it is refused
        in :meth:`_mcp` as an unknown label; a tool search runs nothing of its own)."""
        runs = [
            name
            for name in ("web_search", "web_fetch", "mcp_url", *self.config.mcp_servers)
            if self.caller.may_use(name)
        ]
        for spec in specs:
            if spec.kind == "tool_search" or (spec.kind == "mcp" and spec.server_url is None):
                continue
            if not self.caller.may_use("mcp_url" if spec.kind == "mcp" else spec.kind):
                what = "an MCP server named by its URL" if spec.kind == "mcp" else f"'{spec.type}'"
                raise BadRequest(
                    f"tools: {what} is a tool this gateway does not run (it runs: "
                    f"{', '.join(runs) or 'no server tools'}).",
                    param="tools",
                )

    # ------------------------------------------------------------ web search

    def _search(self, spec: ServerToolSpec) -> ServerTool:
        settings = self.config.web_search
        uses = [0]

        async def run(arguments: dict[str, Any]) -> ToolOutcome:
            query = arguments.get("query")
            if not isinstance(query, str) or not query.strip():
                return ToolOutcome("web_search needs a 'query' string.", is_error=True)
            if spec.max_uses is not None and uses[0] >= spec.max_uses:
                return ToolOutcome(
                    f"web_search may run {spec.max_uses} times in this request.",
                    is_error=True,
                    data="max_uses_exceeded",
                )
            uses[0] += 1
            began = time.monotonic()
            try:
                hits = await search(
                    query,
                    searxng_url=settings.searxng_url,
                    max_results=settings.max_results,
                    allowed_domains=spec.allowed_domains,
                    blocked_domains=spec.blocked_domains,
                    timeout=settings.timeout,
                )
            except SearchFailed as exc:
                self._log("web_search", began, str(exc))
                code = exc.code or "unavailable"
                return ToolOutcome(f"The search failed: {exc.message}", is_error=True, data=code)
            self._log("web_search", began, None)
            lines = [f"{i + 1}. {h.title}\n   {h.url}\n   {h.snippet}" for i, h in enumerate(hits)]
            text = "\n".join(lines) if lines else f"No results for {query!r}."
            return ToolOutcome(text, data=hits)

        description = "Search the web; answers the top results (title, URL, snippet)."
        function = Function("web_search", SEARCH_PARAMETERS, description)
        return ServerTool(function, spec, run, "web_search")

    # ------------------------------------------------------------ web fetch

    def _fetch(self, spec: ServerToolSpec, messages: Sequence[dict[str, Any]]) -> ServerTool:
        allowed = sorted(urls_in(_texts(messages)))
        settings = self.config.fetch
        private = self.config.allow_private_urls

        async def run(arguments: dict[str, Any]) -> ToolOutcome:
            url = arguments.get("url")
            if not isinstance(url, str) or not is_listed(url, allowed):
                return ToolOutcome(
                    "web_fetch may fetch only a URL that appears in the conversation"
                    + (f": one of {', '.join(allowed)}." if allowed else " (there is none)."),
                    is_error=True,
                    data="url_not_allowed",
                )
            began = time.monotonic()
            try:
                page = await fetch(
                    url,
                    allow_private=private,
                    max_bytes=settings.max_bytes,
                    timeout=settings.timeout,
                )
            except Exception as exc:  # the page could not be had: the model is told
                self._log("web_fetch", began, str(exc))
                code = getattr(exc, "code", None) or "url_not_accessible"
                return ToolOutcome(f"Fetching {url} failed: {exc}", is_error=True, data=code)
            self._log("web_fetch", began, None)
            return ToolOutcome(f"{page.title}\n\n{page.text}".strip(), data=page)

        url: dict[str, Any] = {"type": "string", "description": "The page's URL."}
        if allowed:
            url["enum"] = allowed
        parameters = {"type": "object", "properties": {"url": url}, "required": ["url"]}
        description = "Fetch a web page named in the conversation; answers its main text."
        return ServerTool(Function("web_fetch", parameters, description), spec, run, "web_fetch")

    # ------------------------------------------------------------ tool search

    def _tool_search(self, spec: ServerToolSpec) -> ServerTool:
        regex = is_regex(spec)

        async def run(arguments: dict[str, Any]) -> ToolOutcome:
            query = arguments.get("pattern" if regex else "query")
            query = query if isinstance(query, str) else arguments.get("query")
            if not isinstance(query, str) or not query.strip():
                what = "a 'pattern'" if regex else "a 'query'"
                return ToolOutcome(
                    f"tool_search needs {what} string.", is_error=True, data="invalid_tool_input"
                )
            try:
                found = matching(spec.deferred, query, regex)
            except re.error as exc:
                return ToolOutcome(
                    f"{query!r} is not a regular expression: {exc}",
                    is_error=True,
                    data="invalid_tool_input",
                )
            return ToolOutcome(found_text(found, query), data=found, loaded=tuple(found))

        return ServerTool(spec_function(spec), spec, run, TOOL_SEARCH)

    # ------------------------------------------------------------ MCP

    async def _mcp(self, spec: ServerToolSpec) -> list[ServerTool]:
        label = spec.name
        if spec.server_url is not None:
            private = self.config.allow_private_urls

            async def url_check(url: str) -> None:
                await check_url(url, private)

            server = self.mcp.adhoc(spec.server_url, spec.headers, url_check=url_check, label=label)
            self.adhoc.append(server)
        else:
            reachable = self.caller.may_use(label)  # outside its scope: no such server
            found = self.mcp.get(label) if reachable else None
            if found is None:
                mine = [name for name in self.mcp.labels if self.caller.may_use(name)]
                served = ", ".join(sorted(mine)) or "none"
                raise BadRequest(
                    f"No MCP server labelled '{label}' in the config's tools.mcp_servers "
                    f"(labels: {served}); name one, or give its server_url.",
                    param="tools",
                )
            server = found
        try:
            offered = await server.list_tools()
        except BadRequest:
            raise  # a server URL the request may not use: the request's error
        except Exception as exc:
            self.listed.append(ServerToolsListed(label, [], str(exc)))
            logger.warning("MCP server %s: listing its tools failed: %s", label, exc)
            return []
        made = []
        for tool in offered:
            if spec.allowed_tools is not None and tool.name not in spec.allowed_tools:
                continue
            made.append(self._mcp_tool(spec, server, tool))
        self.listed.append(ServerToolsListed(label, made))
        return made

    def _mcp_tool(self, spec: ServerToolSpec, server: McpServer, tool: McpTool) -> ServerTool:
        label = spec.name

        async def run(arguments: dict[str, Any]) -> ToolOutcome:
            began = time.monotonic()
            output = await server.call_tool(tool.name, arguments, caller=self.key_name)
            self._log(f"{label}/{tool.name}", began, output.text if output.is_error else None)
            return ToolOutcome(output.text, output.is_error, output)

        schema = tool.input_schema or {"type": "object", "properties": {}}
        function = Function(f"{label}{SEPARATOR}{tool.name}", schema, tool.description or "")
        return ServerTool(function, spec, run, tool.name)

    async def aclose(self) -> None:
        """Close the servers this request named by URL."""
        for server in self.adhoc:
            with contextlib.suppress(Exception):
                await server.close()

    def _log(self, what: str, began: float, error: str | None) -> None:
        took = time.monotonic() - began
        if error is None:
            logger.info("server tool %s for app %s: ok in %.2f s", what, self.key_name, took)
        else:
            logger.info(
                "server tool %s for app %s: failed in %.2f s: %s", what, self.key_name, took, error
            )
