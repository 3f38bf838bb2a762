"""The gateway's models as an MCP server (``/mcp``): its tools, the models each
runs on in a caller's scope, and each call as a request of the caller's app. See
docs/mcp-server.md."""

from mlx_gateway.supervisor.mcp_server.endpoint import PATH, McpEndpoint

__all__ = ["PATH", "McpEndpoint"]
