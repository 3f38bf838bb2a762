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
* tools with ``defer_loading`` are not the model's functions but what its tool
  search (``tool_search_tool_regex_*`` / ``_bm25_*``) finds, unless the
  conversation loaded them already (a ``tool_reference`` in a tool result, an
  earlier search's ``tool_search_tool_result``);
* ``tool_choice`` ``any`` is OpenAI's ``required``, ``tool`` names the function,
  ``disable_parallel_tool_use`` is ``parallel_tool_calls: false``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection
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
    ToolReferenceBlock,
    ToolResultBlock,
    ToolSearchResultBlock,
    ToolUseBlock,
    WebFetchResultBlock,
    WebSearchResultBlock,
)
from mlx_gateway.supervisor.engine.thinking import Thinking, from_anthropic
from mlx_gateway.supervisor.engine.tools import Function, ToolSpec, checked_spec
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.reply.serve import SEPARATOR, TOOL_SEARCH, ServerToolSpec


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
    text = "".join(part.text for part in block.content if isinstance(part, TextBlock))
    loaded = [part.tool_name for part in block.content if isinstance(part, ToolReferenceBlock)]
    if loaded:
        text += f"{chr(10) if text else ''}Loaded the tools: {', '.join(loaded)}."
    return text


def referenced(messages: list[AnthropicMessage]) -> set[str]:
    """The deferred tools the conversation loaded: ``tool_reference`` blocks in tool
    results, and the results of earlier tool searches."""
    names: set[str] = set()
    for message in messages:
        for block in message.content if isinstance(message.content, list) else []:
            if isinstance(block, ToolResultBlock) and isinstance(block.content, list):
                names |= {p.tool_name for p in block.content if isinstance(p, ToolReferenceBlock)}
            elif isinstance(block, ToolSearchResultBlock):
                names |= set(_reference_names(block.content))
    return names


def _reference_names(content: Any) -> list[str]:
    references = content.get("tool_references") if isinstance(content, dict) else None
    return [
        r["tool_name"]
        for r in references or []
        if isinstance(r, dict) and isinstance(r.get("tool_name"), str)
    ]


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
    if isinstance(block, ServerToolUseBlock) and block.name.startswith("tool_search_tool_"):
        return TOOL_SEARCH
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
        elif isinstance(block, ToolSearchResultBlock):
            text = f"Loaded the tools: {', '.join(_reference_names(block.content)) or 'none'}."
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


SERVER_TOOL_KINDS = {
    "web_search": "web_search",
    "web_fetch": "web_fetch",
    "tool_search_tool_regex": "tool_search",
    "tool_search_tool_bm25": "tool_search",
}
"""Anthropic's server tool types (``web_search_20250305``, ``web_fetch_20250910``,
``tool_search_tool_bm25_20251119`` …) by the name their type begins with → the
gateway's tool."""


def request_tools(
    tools: list[AnthropicTool] | None,
    choice: ToolChoice | None,
    mcp_servers: list[McpServerDefinition] | None = None,
    loaded: Collection[str] = (),
) -> RequestTools:
    """Sort ``tools``: client tools (an ``input_schema``) are the model's functions,
    those with ``defer_loading`` (unless ``loaded`` names them) the tool search's;
    server tools (web search, web fetch, tool search) and ``mcp_servers`` run on
    the gateway."""
    functions = []
    deferred = []
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
                "client tools with an input_schema, web_search_*, web_fetch_* and "
                "tool_search_tool_*).",
                param=f"tools.{i}.type",
            )
        elif tool.input_schema is None:
            raise BadRequest(
                f"tools.{i}.input_schema: Field required (a client tool needs its schema).",
                param=f"tools.{i}.input_schema",
            )
        else:
            function = Function(tool.name, tool.input_schema, tool.description)
            if tool.defer_loading and tool.name not in loaded:
                deferred.append(function)
            else:
                functions.append(function)
    if deferred:
        server = _with_deferred(server, deferred)
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


def _with_deferred(server: list[ServerToolSpec], deferred: list[Function]) -> list[ServerToolSpec]:
    """``server`` with the deferred tools given to its tool search."""
    search = next((s for s in server if s.kind == "tool_search"), None)
    if search is None:
        raise BadRequest(
            "tools: a tool with defer_loading needs a tool search tool in tools "
            "(tool_search_tool_regex_20251119 or tool_search_tool_bm25_20251119).",
            param="tools",
        )
    spec = dataclasses.replace(search, deferred=deferred)
    return [spec if s is search else s for s in server]


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
