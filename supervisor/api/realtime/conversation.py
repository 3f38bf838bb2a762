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

from msgspec import UNSET, Struct, UnsetType

from mlx_gateway.supervisor.api.realtime.events import ItemFields, PartFields
from mlx_gateway.supervisor.errors import BadRequest

BETA_PARTS = {"output_text": "text", "output_audio": "audio"}
"""The beta interface's names of the assistant's part types."""
GA_PARTS = {v: k for k, v in BETA_PARTS.items()}


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid4().hex[:20]}"


@dataclass
class Part:
    """A message's content part, its ``type`` in the GA vocabulary: ``input_text`` /
    ``output_text`` (``text``), ``input_audio`` / ``output_audio`` (``transcript``)."""

    type: str
    text: str | None = None
    """Its text, or an audio part's transcript (``None``: an ``input_audio`` part's
    transcript not made yet)."""

    @property
    def spoken(self) -> bool:
        return self.type in ("input_audio", "output_audio")

    def rendered(self, beta: bool) -> PartObject:
        """As an item's part (the user's audio is not echoed back)."""
        kind = BETA_PARTS.get(self.type, self.type) if beta else self.type
        if not self.spoken:
            return PartObject(kind, text=self.text)
        audio = None if self.type == "input_audio" else UNSET
        return PartObject(kind, transcript=self.text, audio=audio)

    def event_part(self) -> PartObject:
        """As the part of a ``response.content_part.added`` / ``.done`` event:
        ``text`` or ``audio`` in both dialects (the GA API names the item's part
        ``output_audio`` but these events' part ``audio``; the Agents SDK validates
        it so)."""
        kind = BETA_PARTS.get(self.type, self.type)
        if self.spoken:
            return PartObject(kind, transcript=self.text)
        return PartObject(kind, text=self.text)


class PartObject(Struct):
    type: str
    text: str | UnsetType | None = UNSET
    transcript: str | UnsetType | None = UNSET
    audio: UnsetType | None = UNSET


class ItemObject(Struct, kw_only=True):
    """An item as the server writes it (a message's fields, or a call's)."""

    id: str
    object: str = "realtime.item"
    type: str
    status: str
    role: str | UnsetType | None = UNSET
    content: list[PartObject] | UnsetType = UNSET
    call_id: str | UnsetType | None = UNSET
    name: str | UnsetType | None = UNSET
    arguments: str | UnsetType | None = UNSET
    output: str | UnsetType | None = UNSET


@dataclass
class Item:
    id: str
    type: str
    """``message``, ``function_call`` or ``function_call_output``."""
    role: str | None = None
    content: list[Part] = field(default_factory=list)
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
        return "".join(p.text or "" for p in self.content)

    def rendered(self, beta: bool) -> ItemObject:
        out = ItemObject(id=self.id, type=self.type, status=self.status)
        if self.type == "message":
            out.role = self.role
            out.content = [part.rendered(beta) for part in self.content]
        elif self.type == "function_call":
            out.call_id, out.name, out.arguments = self.call_id, self.name, self.arguments
        else:
            out.call_id, out.output = self.call_id, self.output
        return out


class Conversation:
    def __init__(self) -> None:
        self.items: list[Item] = []

    def last_id(self) -> str | None:
        return self.items[-1].id if self.items else None

    def get(self, item_id: str | None, param: str = "item_id") -> Item:
        for item in self.items:
            if item.id == item_id:
                return item
        raise BadRequest(
            f"Item with item_id not found: {item_id}", param=param, code="item_not_found"
        )

    def add(self, item: Item, previous_item_id: str | None = None) -> str | None:
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

    def delete(self, item_id: str | None) -> None:
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


def _text(value: str | None, param: str) -> str:
    if value is None:
        raise BadRequest(f"Invalid type for '{param}': a string.", param=param)
    return value


def parse_item(data: ItemFields) -> Item:
    """An item of ``conversation.item.create`` (either dialect's part names)."""
    item_id = data.id or new_id("item")
    kind = data.type
    if kind == "function_call":
        try:
            json.loads(data.arguments)
        except ValueError:
            raise BadRequest("'item.arguments' is not JSON.", param="item.arguments") from None
        return Item(
            item_id,
            kind,
            call_id=data.call_id or new_id("call"),
            name=_text(data.name, "item.name"),
            arguments=data.arguments,
        )
    if kind == "function_call_output":
        return Item(
            item_id,
            kind,
            call_id=_text(data.call_id, "item.call_id"),
            output=_text(data.output, "item.output"),
        )
    if kind != "message":
        raise BadRequest(
            f"Invalid value for 'item.type': {kind!r} (message, function_call or "
            "function_call_output).",
            param="item.type",
            code="invalid_value",
        )
    role = data.role
    if role not in ("user", "assistant", "system"):
        raise BadRequest(
            "Invalid value for 'item.role': user, assistant or system.", param="item.role"
        )
    if not data.content:
        raise BadRequest("'item.content' must be a non-empty list.", param="item.content")
    item = Item(item_id, kind, role=role)
    for i, part in enumerate(data.content):
        item.content.append(_part(item, part, f"item.content[{i}]"))
    return item


def _part(item: Item, part: PartFields, param: str) -> Part:
    kind = GA_PARTS.get(part.type, part.type)
    allowed = {
        "user": ("input_text", "input_audio"),
        "system": ("input_text",),
        "assistant": ("output_text", "output_audio"),
    }[item.role or "user"]
    if kind not in allowed:
        raise BadRequest(
            f"Invalid value for '{param}.type': {part.type!r}; a {item.role} message "
            f"takes {', '.join(allowed)}.",
            param=f"{param}.type",
            code="invalid_value",
        )
    if kind in ("input_text", "output_text"):
        return Part(kind, _text(part.text, f"{param}.text"))
    if kind == "output_audio":
        return Part(kind, part.transcript or "")
    if part.audio is not None:
        if item.audio:
            raise BadRequest("One input_audio part per item.", param=param)
        item.audio = decode_base64(part.audio, f"{param}.audio")
    elif part.transcript is None:
        raise BadRequest(f"'{param}' needs 'audio' or 'transcript'.", param=param)
    return Part(kind, part.transcript)


def decode_base64(value: str, param: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest(
            f"Invalid value for '{param}': not base64.", param=param, code="invalid_value"
        ) from None
