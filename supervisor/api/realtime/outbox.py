"""Server events onto the WebSocket, in the dialect the client speaks.

Events are written in the GA vocabulary; for a beta client (``OpenAI-Beta:
realtime=v1``) :class:`Outbox` renames what the beta interface named otherwise
and leaves out what it did not have (``conversation.item.done``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import msgspec
from starlette.websockets import WebSocket, WebSocketDisconnect

from mlx_gateway.supervisor.api.realtime.conversation import new_id
from mlx_gateway.supervisor.errors import GatewayError

log = logging.getLogger("mlx_gateway.realtime")

BETA_NAMES = {
    "response.output_text.delta": "response.text.delta",
    "response.output_text.done": "response.text.done",
    "response.output_audio.delta": "response.audio.delta",
    "response.output_audio.done": "response.audio.done",
    "response.output_audio_transcript.delta": "response.audio_transcript.delta",
    "response.output_audio_transcript.done": "response.audio_transcript.done",
    "conversation.item.added": "conversation.item.created",
}
BETA_SKIPPED = frozenset({"conversation.item.done"})


class ClientGone(Exception):
    """The WebSocket closed: nothing more can be sent."""


class Outbox:
    def __init__(self, websocket: WebSocket, beta: bool) -> None:
        self.websocket = websocket
        self.beta = beta
        self._lock = asyncio.Lock()
        self.closed = False

    async def send(self, type: str, **fields: Any) -> None:
        """Send an event; its fields are JSON values or Structs (written as JSON)."""
        if self.beta:
            if type in BETA_SKIPPED:
                return
            type = BETA_NAMES.get(type, type)
        event = {"type": type, "event_id": new_id("event"), **fields}
        text = json.dumps(msgspec.to_builtins(event))
        if self.closed:
            raise ClientGone
        async with self._lock:
            try:
                await self.websocket.send_text(text)
            except (WebSocketDisconnect, RuntimeError, OSError) as exc:
                self.closed = True
                raise ClientGone from exc

    async def error(self, exc: GatewayError, event_id: str | None = None) -> None:
        """An ``error`` event: the session goes on."""
        log.info("realtime error event: %s", exc.message)
        body = exc.body()["error"]
        await self.send("error", error={**body, "event_id": event_id})
