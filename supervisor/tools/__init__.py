"""Tools the gateway runs itself between two rounds of a model (docs/tools.md):
web search (:mod:`.web_search`), web fetch (:mod:`.web_fetch`), the URL rules both
follow (:mod:`.safety`), and MCP servers.

:mod:`.mcp` reaches MCP servers through the official ``mcp`` SDK (2.x): the
config's servers by label (:class:`McpServers`, made at start and closed at
shutdown, the gateway's ``mcp``) and a request's own by URL (:meth:`McpServers.adhoc`).
Their tools come back as :class:`McpTool`, a call's result as :class:`ToolOutput`,
an error one when anything went wrong: a tool call never raises for what a server
did. The SDK is imported once a server is used, not with the gateway.

Layer: below reply/ (which runs the tool loop); it reads the config, the gateway's
errors and the protocol, never api/, reply/, engine/, pool/ or http/.
"""

from __future__ import annotations

from mlx_gateway.supervisor.tools.mcp import McpServer, McpServerError, McpServers, UrlCheck
from mlx_gateway.supervisor.tools.results import McpTool, ToolOutput

__all__ = ["McpServer", "McpServerError", "McpServers", "McpTool", "ToolOutput", "UrlCheck"]
