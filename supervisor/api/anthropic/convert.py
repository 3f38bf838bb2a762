"""From an Anthropic Messages request to the chat-completions vocabulary of a turn.

* ``system`` becomes the first, ``system`` message; a ``system`` message inside
  ``messages`` (allowed by a beta, see :mod:`.betas`) stays a ``system`` message in
  its place: the worker renders it as a system turn where the chat template does,
  else adds its text to the first system message;
* a user message's ``tool_result`` blocks become ``tool`` messages (before the rest
  of that message, as Anthropic requires results to come first); its text and
  images become a user message (images as ``image_url`` parts with a ``data:`` or
  http(s) URL, for vision models);
* an assistant message's ``tool_use`` blocks become ``tool_calls`` (arguments as
  JSON text), its ``thinking`` blocks ``reasoning_content``;
* ``tool_choice`` ``any`` is OpenAI's ``required``, ``tool`` names the function,
  ``disable_parallel_tool_use`` is ``parallel_tool_calls: false``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from mlx_gateway.supervisor.api.anthropic.schemas import (
    AnthropicMessage,
    AnthropicTool,
    Base64Source,
    ImageBlock,
    McpServerDefinition,
    McpToolResultBlock,
    McpToolUseBlock,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ThinkingConfig,
    ToolChoice,
    ToolResultBlock,
    ToolUseBlock,
    WebFetchResultBlock,
    WebSearchResultBlock,
)
from mlx_gateway.supervisor.engine.thinking import Thinking, from_anthropic
from mlx_gateway.supervisor.engine.tools import Function, ToolSpec, checked_spec
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.reply.serve import SEPARATOR, ServerToolSpec


def system_text(system: str | list[TextBlock] | None) -> str | None:
    if system is None or isinstance(system, str):
        return system or None
    return "\n".join(block.text for block in system) or None


def _image_part(block: ImageBlock) -> dict[str, Any]:
    source = block.source
    if isinstance(source, Base64Source):
        url = f"data:{source.media_type};base64,{source.data}"
    else:
        url = source.url
    return {"type": "image_url", "image_url": {"url": url, "detail": "auto"}}


def _result_text(block: ToolResultBlock) -> str:
    if isinstance(block.content, str):
        return block.content
    # Images in a tool result have no place in a tool message: only its text goes on.
    return "".join(part.text for part in block.content if isinstance(part, TextBlock))


def to_chat(
    system: str | list[TextBlock] | None, messages: list[AnthropicMessage]
) -> list[dict[str, Any]]:
    """Chat-completions messages of an Anthropic conversation."""
    out: list[dict[str, Any]] = []
    text = system_text(system)
    if text:
        out.append({"role": "system", "content": text})
    for i, message in enumerate(messages):
        blocks = (
            [TextBlock(message.content)] if isinstance(message.content, str) else message.content
        )
        if message.role == "assistant":
            out.append(_assistant(blocks))
            out += _server_results(blocks)
            continue
        if message.role == "system":
            out.append({"role": "system", "content": _system_message_text(blocks, i)})
            continue
        parts: list[dict[str, Any]] = []
        for block in blocks:
            if isinstance(block, ToolResultBlock):
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": block.tool_use_id,
                        "content": _result_text(block),
                    }
                )
            elif isinstance(block, TextBlock):
                parts.append({"type": "text", "text": block.text})
            elif isinstance(block, ImageBlock):
                parts.append(_image_part(block))
        if parts:
            if all(p["type"] == "text" for p in parts):
                out.append({"role": "user", "content": "".join(p["text"] for p in parts)})
            else:
                out.append({"role": "user", "content": parts})
    return out


def _system_message_text(blocks: list[Any], index: int) -> str:
    for block in blocks:
        if not isinstance(block, TextBlock):
            raise BadRequest(
                f"A system message holds only text blocks, not '{_block_type(block)}'.",
                param=f"messages[{index}].content",
            )
    return "".join(block.text for block in blocks)


def _block_type(block: Any) -> str:
    return str(type(block).__struct_config__.tag)


def _called(block: ToolUseBlock | ServerToolUseBlock | McpToolUseBlock) -> str:
    """The name the model called a tool by (an MCP tool's: ``<server>__<tool>``)."""
    if isinstance(block, McpToolUseBlock):
        return f"{block.server_name}{SEPARATOR}{block.name}"
    return block.name


def _server_results(blocks: list[Any]) -> list[dict[str, Any]]:
    """The results of the server tools an assistant message holds, as tool messages."""
    out = []
    for block in blocks:
        if isinstance(block, McpToolResultBlock):
            text = block.content if isinstance(block.content, str) else ""
            if not isinstance(block.content, str):
                text = "".join(part.text for part in block.content)
        elif isinstance(block, WebSearchResultBlock | WebFetchResultBlock):
            text = json.dumps(block.content, ensure_ascii=False)
        else:
            continue
        out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": text})
    return out


def _assistant(blocks: list[Any]) -> dict[str, Any]:
    text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
    thinking = "".join(b.thinking for b in blocks if isinstance(b, ThinkingBlock))
    calls = [
        {
            "id": b.id,
            "type": "function",
            "function": {"name": _called(b), "arguments": json.dumps(b.input, ensure_ascii=False)},
        }
        for b in blocks
        if isinstance(b, ToolUseBlock | ServerToolUseBlock | McpToolUseBlock)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        message["tool_calls"] = calls
    if thinking:
        message["reasoning_content"] = thinking
    return message


@dataclass
class RequestTools:
    """A request's tools: the client's functions, and the tools the gateway runs."""

    spec: ToolSpec
    server: list[ServerToolSpec] = field(default_factory=list)
    server_choice: str | None = None


SERVER_TOOL_KINDS = {"web_search": "web_search", "web_fetch": "web_fetch"}
"""Anthropic's server tool types (``web_search_20250305``, ``web_fetch_20250910`` …)
by the name their type begins with → the gateway's tool."""


def request_tools(
    tools: list[AnthropicTool] | None,
    choice: ToolChoice | None,
    mcp_servers: list[McpServerDefinition] | None = None,
) -> RequestTools:
    """Sort ``tools``: client tools (an ``input_schema``) are the model's functions;
    server tools (web search, web fetch) and ``mcp_servers`` run on the gateway."""
    functions = []
    server: list[ServerToolSpec] = []
    for i, tool in enumerate(tools or []):
        kind = next(
            (k for prefix, k in SERVER_TOOL_KINDS.items() if (tool.type or "").startswith(prefix)),
            None,
        )
        if kind is not None:
            server.append(
                ServerToolSpec(
                    kind,  # type: ignore[arg-type]
                    type=tool.type or "",
                    name=tool.name,
                    max_uses=tool.max_uses,
                    allowed_domains=tool.allowed_domains or [],
                    blocked_domains=tool.blocked_domains or [],
                )
            )
        elif tool.type not in (None, "custom"):
            raise BadRequest(
                f"tools.{i}.type: '{tool.type}' is a tool this gateway does not run (it runs "
                "client tools with an input_schema, web_search_* and web_fetch_*).",
                param=f"tools.{i}.type",
            )
        elif tool.input_schema is None:
            raise BadRequest(
                f"tools.{i}.input_schema: Field required (a client tool needs its schema).",
                param=f"tools.{i}.input_schema",
            )
        else:
            functions.append(Function(tool.name, tool.input_schema, tool.description))
    for server_def in mcp_servers or []:
        config = server_def.tool_configuration
        if config is not None and not config.enabled:
            continue
        token = server_def.authorization_token
        server.append(
            ServerToolSpec(
                "mcp",
                type="mcp",
                name=server_def.name,
                server_url=server_def.url,
                headers={"Authorization": f"Bearer {token}"} if token else {},
                allowed_tools=config.allowed_tools if config is not None else None,
            )
        )
    mode = "auto"
    parallel = True
    server_choice = None
    names = {s.name for s in server if s.kind != "mcp"}
    if choice is not None:
        mode = {"auto": "auto", "any": "required", "none": "none"}.get(choice.type, "")
        if choice.type == "tool" and choice.name in names:
            mode, server_choice = "auto", _server_function(choice.name, server)
        elif choice.type == "tool":
            mode = choice.name or ""
        parallel = not choice.disable_parallel_tool_use
    if mode == "required" and not functions and server:
        spec = ToolSpec([], "required", parallel)  # the server tools join them in the serve
    else:
        spec = checked_spec(functions, mode, parallel, "tool_choice")
    return RequestTools(spec, server, server_choice)


def _server_function(name: str | None, server: list[ServerToolSpec]) -> str:
    """The function name the model sees for the server tool the client named."""
    spec = next(s for s in server if s.name == name)
    return spec.kind


def thinking_of(
    thinking: ThinkingConfig | None,
    enable_thinking: bool | None = None,
    thinking_budget: int | None = None,
) -> Thinking:
    """``thinking`` (and the top-level extensions, which win) as the engine's
    thinking settings (see :mod:`~mlx_gateway.supervisor.engine.thinking`)."""
    if thinking is None:
        return from_anthropic(None, None, enable_thinking, thinking_budget)
    return from_anthropic(thinking.type, thinking.budget_tokens, enable_thinking, thinking_budget)
