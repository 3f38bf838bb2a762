"""What the gateway keeps of an MCP server's answers: its tools as :class:`McpTool`,
a call's result as :class:`ToolOutput` (the text a model reads). No SDK import here:
the gateway imports the ``mcp`` SDK once a server is used (:mod:`.content`)."""

from __future__ import annotations

from typing import Any

import msgspec


class McpTool(msgspec.Struct, frozen=True, kw_only=True):
    """One tool of an MCP server, as its ``tools/list`` gives it."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = msgspec.field(default_factory=dict)
    """The JSON Schema of its arguments (an object schema)."""


class ToolOutput(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call's result, or why there is none (``is_error``)."""

    text: str
    """The result's text content joined; other content described in a few words; for
    an error, what went wrong."""
    is_error: bool = False
    raw: Any = None
    """The result's structured content, when the tool gave one."""
