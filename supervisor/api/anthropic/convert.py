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
from typing import Any

from mlx_gateway.supervisor.api.anthropic.schemas import (
    AnthropicMessage,
    AnthropicTool,
    Base64Source,
    ImageBlock,
    TextBlock,
    ThinkingBlock,
    ThinkingConfig,
    ToolChoice,
    ToolResultBlock,
    ToolUseBlock,
)
from mlx_gateway.supervisor.engine.thinking import Thinking, from_anthropic
from mlx_gateway.supervisor.engine.tools import Function, ToolSpec, checked_spec
from mlx_gateway.supervisor.errors import BadRequest


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


def _assistant(blocks: list[Any]) -> dict[str, Any]:
    text = "".join(b.text for b in blocks if isinstance(b, TextBlock))
    thinking = "".join(b.thinking for b in blocks if isinstance(b, ThinkingBlock))
    calls = [
        {
            "id": b.id,
            "type": "function",
            "function": {"name": b.name, "arguments": json.dumps(b.input, ensure_ascii=False)},
        }
        for b in blocks
        if isinstance(b, ToolUseBlock)
    ]
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        message["tool_calls"] = calls
    if thinking:
        message["reasoning_content"] = thinking
    return message


def tool_spec(tools: list[AnthropicTool] | None, choice: ToolChoice | None) -> ToolSpec:
    functions = [Function(t.name, t.input_schema, t.description) for t in tools or []]
    mode = "auto"
    parallel = True
    if choice is not None:
        mode = {"auto": "auto", "any": "required", "none": "none"}.get(choice.type, "")
        if choice.type == "tool":
            mode = choice.name or ""
        parallel = not choice.disable_parallel_tool_use
    return checked_spec(functions, mode, parallel, "tool_choice")


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
