"""The content blocks of the tools the gateway ran for a message, in Anthropic's
shapes: ``server_tool_use`` then ``web_search_tool_result`` (each hit's url, title
and page_age) or ``web_fetch_tool_result`` (the page's main text as a text
document), and ``mcp_tool_use`` then ``mcp_tool_result`` (``is_error`` and the
server's text), and a tool search's ``server_tool_use`` (``tool_search_tool_regex``
or ``…_bm25``) then ``tool_search_tool_result`` (the ``tool_reference`` of each
tool it loaded). A failed search or fetch is its result block's error object, with
the error code Anthropic uses for the case."""

from __future__ import annotations

import datetime
import json
from typing import Any

from mlx_gateway.supervisor.reply.serve import ServerToolCall, ServerToolResult


def block_id(call_id: str, kind: str) -> str:
    """A server block's id from the model's call id (``toolu_…``): ``srvtoolu_…`` for
    the built-in tools, ``mcptoolu_…`` for MCP tools, as Anthropic names them."""
    rest = call_id.split("_", 1)[-1]
    return f"{'mcptoolu' if kind == 'mcp' else 'srvtoolu'}_{rest}"


def use_block(event: ServerToolCall) -> dict[str, Any]:
    """The ``server_tool_use`` or ``mcp_tool_use`` block of a call (input filled in)."""
    spec = event.tool.spec
    try:
        arguments = json.loads(event.arguments or "{}")
    except ValueError:
        arguments = {"arguments": event.arguments}
    block: dict[str, Any] = {"type": "server_tool_use", "id": block_id(event.id, spec.kind)}
    if spec.kind == "tool_search":
        regex = "regex" in spec.type
        block["name"] = "tool_search_tool_regex" if regex else "tool_search_tool_bm25"
    elif spec.kind == "mcp":
        block["type"] = "mcp_tool_use"
        block["name"] = event.tool.tool_name
        block["server_name"] = spec.name
    else:
        block["name"] = spec.name or spec.kind
    block["input"] = arguments if isinstance(arguments, dict) else {"arguments": arguments}
    return block


def result_block(event: ServerToolResult) -> dict[str, Any]:
    spec, outcome = event.tool.spec, event.outcome
    tool_use_id = block_id(event.id, spec.kind)
    if spec.kind == "mcp":
        return {
            "type": "mcp_tool_result",
            "tool_use_id": tool_use_id,
            "is_error": outcome.is_error,
            "content": [{"type": "text", "text": outcome.text}],
        }
    if spec.kind == "tool_search":
        return {
            "type": "tool_search_tool_result",
            "tool_use_id": tool_use_id,
            "content": _found(event),
        }
    if spec.kind == "web_search":
        content: Any
        if outcome.is_error:
            code = outcome.data if isinstance(outcome.data, str) else "unavailable"
            content = {"type": "web_search_tool_result_error", "error_code": code}
        else:
            content = [
                {
                    "type": "web_search_result",
                    "url": hit.url,
                    "title": hit.title,
                    "encrypted_content": hit.snippet,
                    "page_age": hit.page_age,
                }
                for hit in outcome.data or []
            ]
        return {"type": "web_search_tool_result", "tool_use_id": tool_use_id, "content": content}
    if outcome.is_error:
        code = outcome.data if isinstance(outcome.data, str) else "url_not_accessible"
        content = {"type": "web_fetch_tool_error", "error_code": code}
    else:
        page = outcome.data
        content = {
            "type": "web_fetch_result",
            "url": page.url,
            "content": {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": page.text},
                "title": page.title,
            },
            "retrieved_at": datetime.datetime.now(datetime.UTC).isoformat(),
        }
    return {"type": "web_fetch_tool_result", "tool_use_id": tool_use_id, "content": content}


def _found(event: ServerToolResult) -> dict[str, Any]:
    """A tool search's result: the tools it loaded, or its error."""
    outcome = event.outcome
    if outcome.is_error:
        code = outcome.data if isinstance(outcome.data, str) else "unavailable"
        return {
            "type": "tool_search_tool_result_error",
            "error_code": code,
            "error_message": outcome.text,
        }
    references = [{"type": "tool_reference", "tool_name": f.name} for f in outcome.loaded]
    return {"type": "tool_search_tool_search_result", "tool_references": references}
