"""From Ollama's chat and generate requests to the chat-completions vocabulary of a turn.

* ``images`` (base64 files) become ``image_url`` parts with a ``data:`` URL, in
  front of the message's text, for vision models;
* an assistant's ``tool_calls`` (arguments as an object) become chat-completions
  calls with ids; a ``tool`` message answers the earliest open call of its
  ``tool_name`` (else the earliest open call), as Ollama's messages carry no ids;
* ``thinking`` on an assistant message is its ``reasoning_content``;
* ``format`` ``"json"`` or a schema is the grammar-constrained output;
* ``think`` is ``enable_thinking`` (an effort string as ``reasoning_effort``).
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from mlx_gateway.supervisor.api.ollama.schemas import (
    Format,
    OllamaMessage,
    OllamaTool,
    Think,
)
from mlx_gateway.supervisor.engine.thinking import Thinking, from_effort
from mlx_gateway.supervisor.engine.tools import Function, OutputSpec, ToolSpec, checked_spec
from mlx_gateway.supervisor.errors import BadRequest

ROLES = ("system", "user", "assistant", "tool")

_SIGNATURES = (
    (b"\x89PNG", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF8", "image/gif"),
    (b"RIFF", "image/webp"),
    (b"BM", "image/bmp"),
)


def image_url(data: str, param: str) -> dict[str, Any]:
    """An ``image_url`` part for one base64 image of a message."""
    try:
        head = base64.b64decode(data[:64] + "=" * (-len(data[:64]) % 4), validate=False)
    except (binascii.Error, ValueError):
        raise BadRequest(f"'{param}' is not base64 image data.", param=param) from None
    media = next((m for sig, m in _SIGNATURES if head.startswith(sig)), "image/png")
    return {"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}}


def user_content(text: str, images: list[str] | None, where: str) -> Any:
    """A message's content: the text, or image parts and then the text."""
    if not images:
        return text
    parts = [image_url(data, f"{where}.images[{j}]") for j, data in enumerate(images)]
    if text:
        parts.append({"type": "text", "text": text})
    return parts


def to_chat(messages: list[OllamaMessage]) -> list[dict[str, Any]]:
    """Chat-completions messages of an Ollama conversation."""
    out: list[dict[str, Any]] = []
    open_calls: list[tuple[str, str]] = []  # (id, function name) not answered yet
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if message.role not in ROLES:
            raise BadRequest(
                f"Invalid role '{message.role}' in {where}; use one of {', '.join(ROLES)}.",
                param=f"{where}.role",
            )
        text = message.content or ""
        if message.role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": text}
            if message.thinking:
                entry["reasoning_content"] = message.thinking
            calls = []
            for j, call in enumerate(message.tool_calls or []):
                call_id = call.id or f"call_{i}_{j}"
                arguments = call.function.arguments
                if not isinstance(arguments, str):
                    arguments = json.dumps(arguments, ensure_ascii=False)
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.function.name, "arguments": arguments},
                    }
                )
                open_calls.append((call_id, call.function.name))
            if calls:
                entry["tool_calls"] = calls
                entry["content"] = text or None
            out.append(entry)
        elif message.role == "tool":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": message.tool_call_id or _answered(open_calls, message),
                    "content": text,
                }
            )
        elif message.role == "user":
            out.append({"role": "user", "content": user_content(text, message.images, where)})
        else:
            out.append({"role": "system", "content": text})
    return out


def _answered(open_calls: list[tuple[str, str]], message: OllamaMessage) -> str:
    """The id of the call a tool message answers (and no longer open)."""
    for k, (call_id, name) in enumerate(open_calls):
        if message.tool_name is None or name == message.tool_name:
            del open_calls[k]
            return call_id
    return f"call_{message.tool_name or 'tool'}"


def tool_spec(tools: list[OllamaTool] | None) -> ToolSpec:
    functions = [
        Function(t.function.name, t.function.parameters or {}, t.function.description)
        for t in tools or []
    ]
    names = [f.name for f in functions]
    if len(set(names)) != len(names):
        raise BadRequest("Function names in 'tools' must be unique.", param="tools")
    return checked_spec(functions, "auto", True, "tools")


def output_of(fmt: Format) -> OutputSpec:
    """``format``: ``"json"`` any JSON object, a mapping a JSON schema, ``""`` text."""
    if fmt is None or fmt == "":
        return OutputSpec()
    if fmt == "json":
        return OutputSpec("json_object", None, "format")
    if isinstance(fmt, dict):
        return OutputSpec("json_schema", fmt, "format")
    raise BadRequest(
        f"Invalid 'format' {fmt!r}: use \"json\" or a JSON schema object.", param="format"
    )


def thinking_of(think: Think) -> Thinking:
    """``think``: ``true``/``false``, or an effort (``low``, ``medium``, ``high``)."""
    if think is None or isinstance(think, bool):
        return Thinking(enabled=think)
    if think not in ("low", "medium", "high"):
        raise BadRequest(
            f'Invalid \'think\' {think!r}: use true, false, "low", "medium" or "high".',
            param="think",
        )
    return from_effort(think)
