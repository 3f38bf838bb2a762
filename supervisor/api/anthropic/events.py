"""An Anthropic ``message`` built from a turn's events, and its stream.

The stream's order, as Anthropic sends it::

    message_start            the message with empty content and the input tokens
    per content block:       content_block_start, content_block_delta…,
                             content_block_stop
                             (thinking: thinking_delta; text: text_delta;
                             tool_use: one input_json_delta with the arguments)
    message_delta            stop_reason, stop_sequence, output tokens
    message_stop

While the stream is quiet between its opening and its end (a long prefill, a tool
call still being parsed), a keep-alive after each 30 s without an event carries a
``message_delta`` with a null ``stop_reason`` and 0 output tokens
(:meth:`MessageBuilder.keepalive`; the others are pings): the Anthropic SDKs drop
``ping`` before the application sees it, so only such an event feeds the stream
watchdog of a client like Claude Code; the final ``message_delta`` overwrites what
it set.

Each event goes out as ``event: <type>`` and ``data: <json>``.
"""

from __future__ import annotations

import json
from typing import Any

from mlx_gateway.protocol.messages import Usage as WireUsage
from mlx_gateway.supervisor.api.anthropic.server_blocks import result_block, use_block
from mlx_gateway.supervisor.http import sse
from mlx_gateway.supervisor.reply.serve import (
    Finished,
    ReasoningDelta,
    ServerToolCall,
    ServerToolResult,
    TextDelta,
    ToolCallMade,
)

STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use"}


def stop_reason(finish: Finished) -> str:
    if finish.stop_sequence is not None:
        return "stop_sequence"
    return STOP_REASONS.get(finish.reason, "end_turn")


def usage_object(usage: WireUsage) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "output_tokens": usage.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.cached_tokens,
    }


def tool_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the object ``tool_use.input`` must be."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {"arguments": arguments}
    return value if isinstance(value, dict) else {"arguments": value}


class MessageBuilder:
    """Folds :data:`TurnEvent`\\ s into a message (and its events, with ``stream``)."""

    def __init__(self, message_id: str, model: str, *, stream: bool) -> None:
        self.message: dict[str, Any] = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage_object(WireUsage()),
        }
        self.stream = stream
        self._open: dict[str, Any] | None = None
        self._opened = False

    def _event(self, kind: str, **data: Any) -> bytes:
        return sse.named(kind, {"type": kind, **data}) if self.stream else b""

    def opening(self, prompt_tokens: int, cached_tokens: int = 0) -> bytes:
        self.message["usage"]["input_tokens"] = prompt_tokens
        self.message["usage"]["cache_read_input_tokens"] = cached_tokens
        self._opened = True
        return self._event("message_start", message={**self.message, "content": []})

    def keepalive(self) -> bytes:
        """A ``message_delta`` that changes nothing the final one does not set again
        (``b""`` before ``message_start`` and after the end)."""
        if not self._opened or self.message["stop_reason"] is not None:
            return b""
        return self._event(
            "message_delta",
            delta={"stop_reason": None, "stop_sequence": None},
            usage={"output_tokens": 0},
        )

    def error(self, kind: str, message: str) -> bytes:
        self._opened = False
        return self._event("error", error={"type": kind, "message": message})

    def on(self, event: Any) -> bytes:
        match event:
            case ReasoningDelta(text=text):
                out = self._switch({"type": "thinking", "thinking": "", "signature": ""})
                assert self._open is not None
                self._open["thinking"] += text
                return out + self._delta({"type": "thinking_delta", "thinking": text})
            case TextDelta(text=text) if text:
                out = self._switch({"type": "text", "text": ""})
                assert self._open is not None
                self._open["text"] += text
                return out + self._delta({"type": "text_delta", "text": text})
            case ToolCallMade(id=call_id, name=name, arguments=arguments):
                out = self._close()
                block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
                out += self._start(block)
                out += self._delta({"type": "input_json_delta", "partial_json": arguments})
                block["input"] = tool_input(arguments)
                return out + self._close()
            case Finished():
                return self._close() + self._finish(event)
            case ServerToolCall():
                block = use_block(event)
                out = self._close() + self._start({**block, "input": {}})
                out += self._delta(
                    {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
                )
                self.message["content"][-1] = block
                return out + self._close()
            case ServerToolResult():
                block = result_block(event)
                return self._close() + self._start(block) + self._close()
        return b""

    def _index(self) -> int:
        return len(self.message["content"]) - 1

    def _start(self, block: dict[str, Any]) -> bytes:
        self.message["content"].append(block)
        self._open = block
        return self._event("content_block_start", index=self._index(), content_block=dict(block))

    def _switch(self, block: dict[str, Any]) -> bytes:
        if self._open is not None and self._open["type"] == block["type"]:
            return b""
        return self._close() + self._start(block)

    def _delta(self, delta: dict[str, Any]) -> bytes:
        return self._event("content_block_delta", index=self._index(), delta=delta)

    def _close(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return self._event("content_block_stop", index=self._index())

    def _finish(self, finish: Finished) -> bytes:
        message = self.message
        message["stop_reason"] = stop_reason(finish)
        message["stop_sequence"] = finish.stop_sequence
        message["usage"] = usage_object(finish.usage)
        out = self._event(
            "message_delta",
            delta={"stop_reason": message["stop_reason"], "stop_sequence": finish.stop_sequence},
            usage={
                "output_tokens": finish.usage.completion_tokens,
                "cache_read_input_tokens": finish.usage.cached_tokens,
            },
        )
        return out + self._event("message_stop")
