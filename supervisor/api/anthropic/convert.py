"""From an Anthropic Messages request to the chat-completions vocabulary of a turn.

* ``system`` becomes the first, ``system`` message, less its
  ``x-anthropic-billing-header:`` blocks (Claude Code's billing metadata for
  Anthropic's servers, which differs for every session: kept in the prompt, it
  would keep two sessions with the same system prompt and tools from sharing a
  cached prefix); a ``system`` message inside ``messages`` (with any beta or none,
  see :mod:`.betas`) stays a ``system`` message in its place: the worker renders it
  as a system turn where the chat template does, else adds its text to the first
  system message;
* a user message's ``tool_result`` blocks become ``tool`` messages (before the rest
  of that message, as Anthropic requires results to come first); its text and
  images become a user message (images as ``image_url`` parts with a ``data:`` or
  http(s) URL, for vision models); ``document`` blocks become ``file`` parts (read
  by :mod:`..engine.documents`: a PDF's text, or its pages as images for a vision
  model), ``content`` documents their blocks in place. A tool result with images or
  documents keeps them in its tool message, where they stand (a text-only model
  reads a note for each image);
* an assistant message's ``tool_use`` blocks become ``tool_calls`` (arguments as
  JSON text), its ``thinking`` blocks ``reasoning_content``;
* tools with ``defer_loading`` are not the model's functions but what a tool
  search finds: the gateway's (``tool_search_tool_regex_*`` / ``_bm25_*``, whose
  earlier ``tool_search_tool_result`` blocks load them as functions) or the
  client's own (Claude Code's ``ToolSearch``): a ``tool_reference`` in a tool
  result puts the tool's definition in that result, where it stands, and lets the
  model call it (:attr:`ToolSpec.placed`), so the prompt before it does not change.
  Without a search of the gateway's, the deferred tools no reference named stay
  out of the prompt;
* ``tool_choice`` ``any`` is OpenAI's ``required``, ``tool`` names the function,
  ``disable_parallel_tool_use`` is ``parallel_tool_calls: false``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from mlx_gateway.supervisor.api.anthropic.schemas import (
    AnthropicMessage,
    AnthropicTool,
    Base64Source,
    ContentSource,
    DocumentBlock,
    ImageBlock,
    McpServerDefinition,
    McpToolResultBlock,
    McpToolUseBlock,
    PlainTextSource,
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

logger = logging.getLogger(__name__)

BILLING_HEADER = "x-anthropic-billing-header:"
"""How Claude Code's billing block begins (``cc_version=2.1.332.1a1;
cc_entrypoint=…``: three characters follow the session's first message)."""


def is_billing(text: str) -> bool:
    return text.lstrip().startswith(BILLING_HEADER)


def system_text(system: str | list[TextBlock] | None) -> str | None:
    """The text of ``system``, less the billing blocks (logged at debug)."""
    if system is None or isinstance(system, str):
        return None if system is None or is_billing(system) else system or None
    kept = []
    for block in system:
        if is_billing(block.text):
            logger.debug("system: dropped the billing block %r", block.text[:120])
        else:
            kept.append(block.text)
    return "\n".join(kept) or None


def _image_part(block: ImageBlock) -> dict[str, Any]:
    source = block.source
    if isinstance(source, Base64Source):
        url = f"data:{source.media_type};base64,{source.data}"
    else:
        url = source.url
    return {"type": "image_url", "image_url": {"url": url, "detail": "auto"}}


def _document_parts(block: DocumentBlock) -> list[dict[str, Any]]:
    """A ``document`` block as chat parts: a ``file`` part (read before the turn, see
    :mod:`..engine.documents`), or a ``content`` document's own blocks in place."""
    source = block.source
    file: dict[str, Any] = {"title": block.title, "context": block.context}
    if isinstance(source, ContentSource):
        head = f"Document: {block.title}\n" if block.title else ""
        head += f"{block.context}\n" if block.context else ""
        if isinstance(source.content, str):
            return [{"type": "text", "text": f"{head}{source.content}\n"}]
        parts: list[dict[str, Any]] = [{"type": "text", "text": head}] if head else []
        for inner in source.content:
            if isinstance(inner, TextBlock):
                parts.append({"type": "text", "text": inner.text})
            else:
                parts.append(_image_part(inner))
        return [*parts, {"type": "text", "text": "\n"}]
    if isinstance(source, PlainTextSource):
        file["text"] = source.data
    elif isinstance(source, Base64Source):
        file["file_data"] = f"data:{source.media_type};base64,{source.data}"
        file["media_type"] = source.media_type
    else:
        file["file_url"] = source.url
    return [{"type": "file", "file": {k: v for k, v in file.items() if v is not None}}]


def _content_parts(block: Any) -> list[dict[str, Any]]:
    """A text, image or document block as chat parts (no parts for other blocks)."""
    if isinstance(block, TextBlock):
        return [{"type": "text", "text": block.text}]
    if isinstance(block, ImageBlock):
        return [_image_part(block)]
    if isinstance(block, DocumentBlock):
        return _document_parts(block)
    return []


def _result_content(
    block: ToolResultBlock, tools: Mapping[str, Function]
) -> str | list[dict[str, Any]]:
    """A tool result's content: its text, or (with images or documents) its parts in
    order, the loaded tools' definitions after them."""
    if isinstance(block.content, str):
        return block.content
    parts = [p for part in block.content for p in _content_parts(part)]
    text = "".join(p["text"] for p in parts if p["type"] == "text")
    named = [part.tool_name for part in block.content if isinstance(part, ToolReferenceBlock)]
    known = [tools[name] for name in named if name in tools]
    unknown = [name for name in named if name not in tools]
    for loaded in (_functions_text(known), _unknown_text(unknown)):
        if loaded:
            parts.append({"type": "text", "text": f"{chr(10) if text else ''}{loaded}"})
            text += parts[-1]["text"]
    if all(p["type"] == "text" for p in parts):
        return text
    return parts


def _functions_text(found: list[Function]) -> str:
    """The definitions a ``tool_reference`` puts in place, in the encoding clients'
    tool searches promise their model (Claude Code's ``ToolSearch``: one
    ``<function>{"description", "name", "parameters"}</function>`` line a tool
    inside a ``<functions>`` block)."""
    if not found:
        return ""
    lines = [
        "<function>"
        + json.dumps(
            {"description": f.description or "", "name": f.name, "parameters": f.parameters},
            ensure_ascii=False,
        )
        + "</function>"
        for f in found
    ]
    return "<functions>\n" + "\n".join(lines) + "\n</functions>"


def _unknown_text(names: list[str]) -> str:
    return f"Loaded the tools: {', '.join(names)}." if names else ""


def referenced(messages: list[AnthropicMessage]) -> set[str]:
    """The deferred tools that ``tool_reference`` blocks in tool results name: their
    definitions stand in those results (see :func:`to_chat`)."""
    names: set[str] = set()
    for message in messages:
        for block in message.content if isinstance(message.content, list) else []:
            if isinstance(block, ToolResultBlock) and isinstance(block.content, list):
                names |= {p.tool_name for p in block.content if isinstance(p, ToolReferenceBlock)}
    return names


def searched(messages: list[AnthropicMessage]) -> set[str]:
    """The deferred tools earlier searches of the gateway's loaded
    (``tool_search_tool_result`` blocks): the model's functions from then on."""
    names: set[str] = set()
    for message in messages:
        for block in message.content if isinstance(message.content, list) else []:
            if isinstance(block, ToolSearchResultBlock):
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
    system: str | list[TextBlock] | None,
    messages: list[AnthropicMessage],
    tools: Mapping[str, Function] | None = None,
    labels: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Chat-completions messages of an Anthropic conversation (``tools``: the client
    tools by name, whose definitions a ``tool_reference`` puts in its result);
    ``labels`` gets what each of them came from (``system``, ``messages[i]``)."""
    out: list[dict[str, Any]] = []
    text = system_text(system)
    if text:
        out.append({"role": "system", "content": text})
    for i, message in enumerate(messages):
        if labels is not None:
            _label_from(labels, out, i)
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
                        "content": _result_content(block, tools or {}),
                    }
                )
            else:
                parts += _content_parts(block)
        if parts:
            if all(p["type"] == "text" for p in parts):
                out.append({"role": "user", "content": "".join(p["text"] for p in parts)})
            else:
                out.append({"role": "user", "content": parts})
    if labels is not None:
        _label_from(labels, out, len(messages))
    return out


def _label_from(labels: list[str], out: list[dict[str, Any]], index: int) -> None:
    """Label the messages added since the last call: they came from message
    ``index - 1`` (the system prompt before the first one)."""
    source = "system" if index == 0 else f"messages[{index - 1}]"
    labels += [source] * (len(out) - len(labels))


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
    placed: Collection[str] = (),
) -> RequestTools:
    """Sort ``tools``: client tools (an ``input_schema``) are the model's functions,
    those with ``defer_loading`` the tool search's, unless ``loaded`` names them (a
    function from then on) or ``placed`` does (callable, its definition in the
    conversation); server tools (web search, web fetch, tool search) and
    ``mcp_servers`` run on the gateway."""
    functions = []
    deferred = []
    in_place = []
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
            if not tool.defer_loading or tool.name in loaded:
                functions.append(function)
            elif tool.name in placed:
                in_place.append(function)
            else:
                deferred.append(function)
    if deferred:
        server = _with_deferred(server, deferred)
    if in_place and not functions:
        # No tool list in the prompt: a template shows no call format without one.
        functions, in_place = in_place, []
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
        # the server tools join them in the serve
        spec = ToolSpec([], "required", parallel, placed=in_place)
    else:
        spec = checked_spec([*functions, *in_place], mode, parallel, "tool_choice")
        spec = dataclasses.replace(spec, functions=functions, placed=in_place)
    return RequestTools(spec, server, server_choice)


def _with_deferred(server: list[ServerToolSpec], deferred: list[Function]) -> list[ServerToolSpec]:
    """``server`` with the deferred tools given to its tool search; without one (the
    client runs its own search) they stay out of the prompt until referenced."""
    search = next((s for s in server if s.kind == "tool_search"), None)
    if search is None:
        logger.debug(
            "tools: %d deferred tools kept out of the prompt (%s)",
            len(deferred),
            ", ".join(f.name for f in deferred[:10]),
        )
        return server
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
