"""The output items of the tools the gateway ran for a response, and their stream
events: ``mcp_list_tools`` (a server's tools, listed before the first round),
``mcp_call`` (arguments, then ``output`` or ``error``), ``mcp_approval_request``
(a call that waits for the client's ``mcp_approval_response``) and
``web_search_call`` (``action: {type: search, query}``, ``completed`` or
``failed`` with the reason), and a tool search's ``tool_search_call`` then
``tool_search_output`` (the loaded tools' definitions; these two have only the
``output_item`` events), in the shapes and event names of OpenAI's API."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from uuid import uuid4

from mlx_gateway.supervisor.reply.serve import (
    ServerToolApproval,
    ServerToolCall,
    ServerToolResult,
    ServerToolsListed,
)

Emit = Callable[..., bytes]


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid4().hex}"


class ServerItems:
    """Writes server tool items into ``output`` (a response's list), each event
    through ``emit(kind, **data)``."""

    def __init__(self, output: list[dict[str, Any]], emit: Emit) -> None:
        self.output = output
        self.emit = emit
        self.open: dict[str, dict[str, Any]] = {}
        """Call id → its item, until the call ends."""

    def _add(self, item: dict[str, Any]) -> tuple[int, bytes]:
        self.output.append(item)
        index = len(self.output) - 1
        return index, self.emit("response.output_item.added", output_index=index, item=dict(item))

    def _done(self, item: dict[str, Any]) -> bytes:
        index = self.output.index(item)
        return self.emit("response.output_item.done", output_index=index, item=item)

    def listed(self, event: ServerToolsListed) -> bytes:
        item: dict[str, Any] = {
            "id": _id("mcpl"),
            "type": "mcp_list_tools",
            "server_label": event.server_label,
            "tools": [
                {
                    "name": tool.tool_name,
                    "description": tool.function.description,
                    "input_schema": tool.function.parameters,
                    "annotations": None,
                }
                for tool in event.tools
            ],
        }
        if event.error is not None:
            item["error"] = event.error
        index, out = self._add(item)
        where = {"output_index": index, "item_id": item["id"]}
        out += self.emit("response.mcp_list_tools.in_progress", **where)
        ended = "failed" if event.error is not None else "completed"
        out += self.emit(f"response.mcp_list_tools.{ended}", **where)
        return out + self._done(item)

    def call(self, event: ServerToolCall) -> bytes:
        spec = event.tool.spec
        if spec.kind == "tool_search":
            item: dict[str, Any] = {
                "id": _id("tsc"),
                "type": "tool_search_call",
                "call_id": event.id,
                "execution": "server",
                "arguments": _object(event.arguments),
                "status": "in_progress",
            }
            _index, out = self._add(item)
        elif spec.kind == "web_search":
            item = {
                "id": _id("ws"),
                "type": "web_search_call",
                "status": "in_progress",
                "action": {"type": "search", "query": _query(event.arguments)},
            }
            index, out = self._add(item)
            where = {"output_index": index, "item_id": item["id"]}
            out += self.emit("response.web_search_call.in_progress", **where)
            out += self.emit("response.web_search_call.searching", **where)
        else:
            item = {
                "id": _id("mcp"),
                "type": "mcp_call",
                "server_label": spec.name,
                "name": event.tool.tool_name,
                "arguments": "",
                "output": None,
                "error": None,
                "status": "in_progress",
            }
            index, out = self._add(item)
            where = {"output_index": index, "item_id": item["id"]}
            out += self.emit("response.mcp_call.in_progress", **where)
            out += self.emit("response.mcp_call_arguments.delta", **where, delta=event.arguments)
            out += self.emit("response.mcp_call_arguments.done", **where, arguments=event.arguments)
            item["arguments"] = event.arguments
        self.open[event.id] = item
        return out

    def result(self, event: ServerToolResult) -> bytes:
        item = self.open.pop(event.id, None)
        if item is None:
            return b""
        outcome = event.outcome
        where = {"output_index": self.output.index(item), "item_id": item["id"]}
        if item["type"] == "tool_search_call":
            return self._searched(item, event)
        if item["type"] == "web_search_call":
            if outcome.is_error:
                item["status"] = "failed"
                item["error"] = outcome.text
                out = b""
            else:
                item["status"] = "completed"
                hits = outcome.data or []
                item["action"]["sources"] = [{"type": "url", "url": h.url} for h in hits]
                out = self.emit("response.web_search_call.completed", **where)
        else:
            if outcome.is_error:
                item["status"] = "failed"
                item["error"] = {
                    "type": "mcp_tool_execution_error",
                    "content": [{"type": "text", "text": outcome.text}],
                }
                out = self.emit("response.mcp_call.failed", **where)
            else:
                item["status"], item["output"] = "completed", outcome.text
                out = self.emit("response.mcp_call.completed", **where)
        return out + self._done(item)

    def _searched(self, call: dict[str, Any], event: ServerToolResult) -> bytes:
        """A tool search ended: its call, then a ``tool_search_output`` with the
        tools it loaded (none when it failed: its call is ``incomplete``)."""
        call["status"] = "incomplete" if event.outcome.is_error else "completed"
        out = self._done(call)
        tools = [
            {
                "type": "function",
                "name": f.name,
                "description": f.description,
                "parameters": f.parameters,
                "strict": f.strict,
                "defer_loading": True,
            }
            for f in event.outcome.loaded
        ]
        item = {
            "id": _id("tso"),
            "type": "tool_search_output",
            "call_id": event.id,
            "execution": "server",
            "status": "completed",
            "tools": tools,
        }
        _index, added = self._add(item)
        return out + added + self._done(item)

    def approval(self, event: ServerToolApproval) -> bytes:
        item = {
            "id": event.id,
            "type": "mcp_approval_request",
            "server_label": event.tool.spec.name,
            "name": event.tool.tool_name,
            "arguments": event.arguments,
        }
        _index, out = self._add(item)
        return out + self._done(item)


def _query(arguments: str) -> str:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return arguments
    query = value.get("query") if isinstance(value, dict) else None
    return query if isinstance(query, str) else arguments


def _object(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}
