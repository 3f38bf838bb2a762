"""A Realtime session's conversation: its items, and the chat messages they make.

Items are messages (``user``, ``assistant``, ``system``), ``function_call`` and
``function_call_output``, kept in order. A user's audio is in the conversation as
its transcript (the language model reads text): an ``input_audio`` part waits for
the whisper worker's text before a response reads the conversation. An assistant's
audio part is its transcript, cut where the client says playback stopped
(``conversation.item.truncate``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from mlx_gateway.supervisor.errors import BadRequest

BETA_PARTS = {"output_text": "text", "output_audio": "audio"}
"""The beta interface's names of the assistant's part types."""
GA_PARTS = {v: k for k, v in BETA_PARTS.items()}


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid4().hex[:20]}"


@dataclass
class Item:
    id: str
    type: str
    """``message``, ``function_call`` or ``function_call_output``."""
    role: str | None = None
    content: list[dict[str, Any]] = field(default_factory=list)
    """Parts in the GA vocabulary: ``input_text`` / ``output_text`` (``text``),
    ``input_audio`` / ``output_audio`` (``transcript``)."""
    status: str = "completed"
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None
    output: str | None = None
    audio: bytes = b""
    """A user ``input_audio`` part's audio (in the session's input format)."""
    audio_ms: list[int] = field(default_factory=list)
    """An assistant audio part: the end of each spoken sentence, in ms of audio."""
    sentences: list[str] = field(default_factory=list)
    """… and those sentences (what a truncation cuts)."""
    transcribed: asyncio.Future[None] | None = None
    """Set while the user audio's transcript is being made."""

    def text(self) -> str:
        return "".join(p.get("text") or p.get("transcript") or "" for p in self.content)

    def rendered(self, beta: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "object": "realtime.item", "type": self.type}
        out["status"] = self.status
        if self.type == "message":
            parts = []
            for part in self.content:
                part = dict(part)
                if beta:
                    part["type"] = BETA_PARTS.get(part["type"], part["type"])
                if part["type"] == "input_audio":
                    part["audio"] = None  # not echoed back
                parts.append(part)
            out |= {"role": self.role, "content": parts}
        elif self.type == "function_call":
            out |= {"call_id": self.call_id, "name": self.name, "arguments": self.arguments}
        else:
            out |= {"call_id": self.call_id, "output": self.output}
        return out


class Conversation:
    def __init__(self) -> None:
        self.items: list[Item] = []

    def last_id(self) -> str | None:
        return self.items[-1].id if self.items else None

    def get(self, item_id: Any, param: str = "item_id") -> Item:
        for item in self.items:
            if item.id == item_id:
                return item
        raise BadRequest(
            f"Item with item_id not found: {item_id}", param=param, code="item_not_found"
        )

    def add(self, item: Item, previous_item_id: Any = None) -> str | None:
        """Insert ``item`` after ``previous_item_id`` (``None``: at the end; ``root``:
        first); returns the id of the item before it."""
        if any(i.id == item.id for i in self.items):
            raise BadRequest(
                f"Item with id {item.id} already exists.", param="item.id", code="duplicate_id"
            )
        if previous_item_id is None:
            previous = self.last_id()
            self.items.append(item)
            return previous
        if previous_item_id == "root":
            self.items.insert(0, item)
            return None
        before = self.get(previous_item_id, "previous_item_id")
        self.items.insert(self.items.index(before) + 1, item)
        return before.id

    def delete(self, item_id: Any) -> None:
        self.items.remove(self.get(item_id))

    async def messages(self, instructions: str) -> list[dict[str, Any]]:
        """The conversation as chat messages (waiting for pending transcripts)."""
        for item in list(self.items):
            if item.transcribed is not None:
                await asyncio.shield(item.transcribed)
        messages: list[dict[str, Any]] = []
        if instructions:
            messages.append({"role": "system", "content": instructions})
        for item in self.items:
            if item.type == "message":
                messages.append({"role": item.role, "content": item.text()})
            elif item.type == "function_call":
                call = {
                    "id": item.call_id,
                    "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments or "{}"},
                }
                last = messages[-1] if messages else None
                if last and last["role"] == "assistant" and last.get("tool_calls") is not None:
                    last["tool_calls"].append(call)
                else:
                    messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
            else:
                messages.append(
                    {"role": "tool", "tool_call_id": item.call_id, "content": item.output or ""}
                )
        return messages


# ---------------------------------------------------------------- client items


def _text(value: Any, param: str) -> str:
    if not isinstance(value, str):
        raise BadRequest(f"Invalid type for '{param}': a string.", param=param)
    return value


def parse_item(data: Any) -> Item:
    """An item of ``conversation.item.create`` (either dialect's part names)."""
    if not isinstance(data, dict):
        raise BadRequest("Missing required parameter: 'item'.", param="item")
    item_id = data.get("id") or new_id("item")
    kind = data.get("type", "message")
    if kind == "function_call":
        arguments = data.get("arguments", "{}")
        try:
            json.loads(_text(arguments, "item.arguments"))
        except ValueError:
            raise BadRequest("'item.arguments' is not JSON.", param="item.arguments") from None
        return Item(
            _text(item_id, "item.id"),
            kind,
            call_id=_text(data.get("call_id") or new_id("call"), "item.call_id"),
            name=_text(data.get("name"), "item.name"),
            arguments=arguments,
        )
    if kind == "function_call_output":
        return Item(
            _text(item_id, "item.id"),
            kind,
            call_id=_text(data.get("call_id"), "item.call_id"),
            output=_text(data.get("output"), "item.output"),
        )
    if kind != "message":
        raise BadRequest(
            f"Invalid value for 'item.type': {kind!r} (message, function_call or "
            "function_call_output).",
            param="item.type",
            code="invalid_value",
        )
    role = data.get("role")
    if role not in ("user", "assistant", "system"):
        raise BadRequest(
            "Invalid value for 'item.role': user, assistant or system.", param="item.role"
        )
    parts = data.get("content")
    if not isinstance(parts, list) or not parts:
        raise BadRequest("'item.content' must be a non-empty list.", param="item.content")
    item = Item(_text(item_id, "item.id"), kind, role=role)
    for i, part in enumerate(parts):
        item.content.append(_part(item, part, f"item.content[{i}]"))
    return item


def _part(item: Item, part: Any, param: str) -> dict[str, Any]:
    if not isinstance(part, dict):
        raise BadRequest(f"Invalid type for '{param}'.", param=param)
    kind = GA_PARTS.get(part.get("type", ""), part.get("type"))
    allowed = {
        "user": ("input_text", "input_audio"),
        "system": ("input_text",),
        "assistant": ("output_text", "output_audio"),
    }[item.role or "user"]
    if kind not in allowed:
        raise BadRequest(
            f"Invalid value for '{param}.type': {part.get('type')!r}; a {item.role} message "
            f"takes {', '.join(allowed)}.",
            param=f"{param}.type",
            code="invalid_value",
        )
    if kind in ("input_text", "output_text"):
        return {"type": kind, "text": _text(part.get("text"), f"{param}.text")}
    transcript = part.get("transcript")
    if kind == "output_audio":
        return {"type": kind, "transcript": _text(transcript or "", f"{param}.transcript")}
    audio = part.get("audio")
    if audio is not None:
        if item.audio:
            raise BadRequest("One input_audio part per item.", param=param)
        item.audio = decode_base64(audio, f"{param}.audio")
    elif transcript is None:
        raise BadRequest(f"'{param}' needs 'audio' or 'transcript'.", param=param)
    return {"type": kind, "transcript": transcript}


def decode_base64(value: Any, param: str) -> bytes:
    try:
        return base64.b64decode(_text(value, param), validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(
            f"Invalid value for '{param}': not base64.", param=param, code="invalid_value"
        ) from None
