"""Between Responses API items and the chat messages a turn runs on.

Input items become chat-completions messages: ``function_call`` items join the
assistant message before them as ``tool_calls`` (a call in a namespace under the
flat name the model saw, see :mod:`.tools`), ``function_call_output`` items
become ``tool`` messages (their images and ``input_file`` parts kept in place),
``input_file`` parts ``file`` parts (:mod:`..engine.documents`), reasoning items
are dropped (templates re-render thinking from scratch, and most drop earlier
turns' thinking anyway). A stored
response's output goes through the same conversion, so ``previous_response_id``
continues a conversation exactly as if the client had sent all of it again.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import uuid4

import msgspec

from mlx_gateway.supervisor.api.responses.schemas import (
    ContentPart,
    FunctionCallItem,
    FunctionCallOutputItem,
    InputFile,
    InputImage,
    InputItem,
    InputText,
    InputVideo,
    MessageItem,
    OutputText,
    Refusal,
    ServerToolItem,
    VideoURLObject,
)
from mlx_gateway.supervisor.api.responses.tools import flat_name
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.reply.serve import SEPARATOR, TOOL_SEARCH


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid4().hex}"


def _parts(parts: str | list[ContentPart], where: str) -> str | list[dict[str, Any]]:
    """Chat content of a message's parts: a string when it is all text."""
    if isinstance(parts, str):
        return parts
    out: list[dict[str, Any]] = []
    for j, part in enumerate(parts):
        match part:
            case InputText(text=text) | OutputText(text=text):
                out.append({"type": "text", "text": text})
            case Refusal(refusal=text):
                out.append({"type": "text", "text": text})
            case InputImage(image_url=url, detail=detail) if url:
                out.append({"type": "image_url", "image_url": {"url": url, "detail": detail}})
            case InputVideo(video_url=video_url, video=video):
                ref = video_url if video_url is not None else video
                url = ref.url if isinstance(ref, VideoURLObject) else ref
                if not url:
                    raise BadRequest(
                        "An input_video part needs its URL in 'video_url' (a data: URL, an "
                        "http(s) URL or an allowed file path).",
                        param=f"{where}[{j}]",
                        code="invalid_video_url",
                    )
                out.append({"type": "video_url", "video_url": {"url": url}})
            case InputFile():
                file = {
                    "file_data": part.file_data,
                    "file_url": part.file_url,
                    "filename": part.filename,
                    "file_id": part.file_id,
                }
                out.append({"type": "file", "file": {k: v for k, v in file.items() if v}})
            case InputImage():
                raise BadRequest(
                    "Images by 'file_id' are not supported; send 'image_url' (a data: URL or "
                    "an http(s) URL).",
                    param=f"{where}[{j}]",
                )
    if all(p["type"] == "text" for p in out):
        return "".join(p["text"] for p in out)
    return out


def to_chat(items: list[InputItem], where: str = "input") -> list[dict[str, Any]]:
    """Chat-completions messages of Responses API items."""
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        match item:
            case MessageItem(role=role, content=content):
                messages.append({"role": role, "content": _parts(content, f"{where}[{i}].content")})
            case FunctionCallItem(call_id=call_id, name=name, arguments=arguments):
                call = {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": flat_name(item.namespace, name), "arguments": arguments},
                }
                last = messages[-1] if messages else None
                if last is not None and last["role"] == "assistant":
                    last.setdefault("tool_calls", []).append(call)
                else:
                    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            case FunctionCallOutputItem(call_id=call_id, output=output):
                # text, or its parts in order: images and files stay where they stand
                parts = _parts(output, f"{where}[{i}].output")
                messages.append({"role": "tool", "tool_call_id": call_id, "content": parts})
            case ServerToolItem(type="mcp_call" | "web_search_call"):
                messages += _server_call(item, i)
            case ServerToolItem(type="tool_search_call"):
                call_id = item.call_id or item.id or f"call_{i}"
                arguments = json.dumps(item.arguments if isinstance(item.arguments, dict) else {})
                function = {"name": TOOL_SEARCH, "arguments": arguments}
                call = {"id": call_id, "type": "function", "function": function}
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            case ServerToolItem(type="tool_search_output"):
                names = ", ".join(loaded_names([item])) or "none"
                answer = f"Loaded the tools: {names}."
                call_id = item.call_id or item.id or f"call_{i}"
                messages.append({"role": "tool", "tool_call_id": call_id, "content": answer})
            case _:
                pass  # reasoning, MCP listings and approvals
    return messages


def loaded_names(items: list[Any]) -> list[str]:
    """The tools that the ``tool_search_output`` items among ``items`` loaded."""
    names = []
    for item in items:
        if isinstance(item, ServerToolItem) and item.type == "tool_search_output":
            names += [t["name"] for t in item.tools or [] if isinstance(t.get("name"), str)]
    return names


def _server_call(item: ServerToolItem, i: int) -> list[dict[str, Any]]:
    """A server tool's call and answer, as the model saw them when it ran."""
    call_id = item.id or f"call_{i}"
    if item.type == "web_search_call":
        action = item.action or {}
        name, arguments = "web_search", json.dumps({"query": action.get("query", "")})
        answer = "(the search ran; its results were read then)"
    else:
        name = f"{item.server_label}{SEPARATOR}{item.name}"
        arguments = item.arguments if isinstance(item.arguments, str) else "{}"
        answer = item.output if item.output is not None else f"Error: {item.error}"
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": answer},
    ]


def output_items(output: list[dict[str, Any]]) -> list[InputItem]:
    """A response's output as input items (for the stored conversation)."""
    items: list[InputItem] = []
    for entry in output:
        if entry["type"] == "message":
            text = "".join(p.get("text", "") for p in entry["content"])
            items.append(MessageItem(role="assistant", content=text))
        elif entry["type"] == "function_call":
            items.append(
                FunctionCallItem(
                    call_id=entry["call_id"],
                    name=entry["name"],
                    arguments=entry["arguments"],
                    namespace=entry.get("namespace"),
                )
            )
    return items


def stored_input(items: list[InputItem]) -> list[dict[str, Any]]:
    """Input items as ``GET /v1/responses/{id}/input_items`` lists them (with ids)."""
    out = []
    for item in items:
        data = msgspec.to_builtins(item)
        if isinstance(item, MessageItem):
            content = item.content
            if isinstance(content, str):
                kind = "output_text" if item.role == "assistant" else "input_text"
                data["content"] = [{"type": kind, "text": content}]
            data["status"] = data.get("status") or "completed"
            data["id"] = item.id or new_id("msg")
        elif isinstance(item, FunctionCallItem | FunctionCallOutputItem):
            data["id"] = item.id or new_id("fc" if isinstance(item, FunctionCallItem) else "fco")
            data["status"] = data.get("status") or "completed"
        out.append(data)
    return out
