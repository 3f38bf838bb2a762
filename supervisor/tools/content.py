"""The SDK's answers (``mcp_types``) as :class:`.results.McpTool` and
:class:`.results.ToolOutput`: text content joined, other content described briefly."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any

import mcp_types

from mlx_gateway.supervisor.tools.results import McpTool, ToolOutput


def tool_of(tool: mcp_types.Tool) -> McpTool:
    return McpTool(
        name=tool.name,
        description=tool.description or tool.title or "",
        input_schema=dict(tool.input_schema or {"type": "object"}),
    )


def output_of(result: mcp_types.CallToolResult) -> ToolOutput:
    """A ``tools/call`` result as the text a model reads."""
    text = content_text(result.content)
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    return ToolOutput(text=text, is_error=bool(result.is_error), raw=result.structured_content)


def content_text(content: Sequence[Any]) -> str:
    """Text blocks as they are, every other block as a short note in brackets."""
    return "\n".join(_block_text(block) for block in content)


def _block_text(block: Any) -> str:
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        return f"[{block.type}: {block.mime_type}, {_decoded_size(block.data)} bytes]"
    if isinstance(block, mcp_types.ResourceLink):
        return f"[resource link: {block.name} <{block.uri}>]"
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return resource.text
        kind = resource.mime_type or "binary data"
        return f"[resource {resource.uri}: {kind}, {_decoded_size(resource.blob)} bytes]"
    return f"[{getattr(block, 'type', type(block).__name__)} content]"


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)
