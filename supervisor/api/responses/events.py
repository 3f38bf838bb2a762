"""A response object built from a turn's events, and its stream's event grammar.

Every stream event carries a ``sequence_number`` (0, 1, 2, …) and goes out as
``event: <type>`` plus ``data: <json>``. The order::

    response.created, response.in_progress
    per output item, in order:
      reasoning   output_item.added, content_part.added (reasoning_text),
                  reasoning_text.delta…, reasoning_text.done, content_part.done,
                  output_item.done
      message     output_item.added, content_part.added (output_text),
                  output_text.delta…, output_text.done, content_part.done,
                  output_item.done
      function    output_item.added (arguments ""), function_call_arguments.delta,
      call        function_call_arguments.done, output_item.done (a function of a
                  namespace tool: ``name`` and ``namespace`` apart, as the client
                  declared it)
    response.completed (or response.incomplete when max_output_tokens cut it)

The same builder makes the answer of a request that is not streamed (then it
writes no events).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlx_gateway.protocol.messages import TokenLogprob
from mlx_gateway.protocol.messages import Usage as WireUsage
from mlx_gateway.supervisor.api.responses.convert import new_id
from mlx_gateway.supervisor.api.responses.server_items import ServerItems
from mlx_gateway.supervisor.http import sse
from mlx_gateway.supervisor.reply.serve import (
    Finished,
    ReasoningDelta,
    ServerToolApproval,
    ServerToolCall,
    ServerToolResult,
    ServerToolsListed,
    TextDelta,
    ToolCallMade,
)


def _logprobs(entries: list[TokenLogprob]) -> list[dict[str, Any]]:
    return [
        {
            "token": e.text,
            "bytes": list(e.text.encode()),
            "logprob": e.logprob,
            "top_logprobs": [
                {"token": t, "bytes": list(t.encode()), "logprob": lp} for t, lp in e.top
            ],
        }
        for e in entries
    ]


def usage_object(usage: WireUsage, reasoning_tokens: int) -> dict[str, Any]:
    return {
        "input_tokens": usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    }


class ResponseBuilder:
    """Folds :data:`TurnEvent`\\ s into a response (and its events, with ``stream``)."""

    def __init__(
        self,
        skeleton: dict[str, Any],
        *,
        stream: bool,
        logprobs: bool,
        origin: Callable[[str], tuple[str | None, str]] = lambda name: (None, name),
    ) -> None:
        self.response = {**skeleton, "status": "in_progress", "output": [], "usage": None}
        self.stream = stream
        self.logprobs = logprobs
        self.origin = origin
        """(namespace or None, name) of the function the model called by a flat name."""
        self._sequence = 0
        self._open: dict[str, Any] | None = None
        self._text = ""
        self._entries: list[TokenLogprob] = []
        self.server = ServerItems(self.response["output"], self._event)

    # ------------------------------------------------------------ events

    def _event(self, kind: str, **data: Any) -> bytes:
        if not self.stream:
            return b""
        event = {"type": kind, "sequence_number": self._sequence, **data}
        self._sequence += 1
        return sse.named(kind, event)

    def opening(self) -> bytes:
        snapshot = {**self.response, "output": []}
        return self._event("response.created", response=snapshot) + self._event(
            "response.in_progress", response=snapshot
        )

    def keepalive(self) -> bytes:
        """A repeated ``response.in_progress`` (the snapshot of the opening): what a
        quiet stream sends between its opening and its end, so that clients whose
        watchdog counts only events (Codex CLI: 300 s) stay connected; the OpenAI
        SDK and Codex pass it on and change nothing. ``b""`` before the opening and
        after the end."""
        if self._sequence == 0 or self.response["status"] != "in_progress":
            return b""
        return self._event("response.in_progress", response={**self.response, "output": []})

    def error(self, message: str, code: str | None, param: str | None) -> bytes:
        """The ``error`` event of a stream that failed after it started."""
        return self._event("error", code=code, message=message, param=param)

    def on(self, event: Any) -> bytes:
        """Take one turn event; returns its stream events (``b""`` without ``stream``)."""
        match event:
            case ReasoningDelta(text=text):
                out = self._switch("reasoning")
                return out + self._delta(text, [])
            case TextDelta(text=text, logprobs=entries):
                if not text and (self._open is None or self._open["type"] != "message"):
                    self._entries += entries  # log-probabilities of text sent already
                    return b""
                out = self._switch("message")
                return out + self._delta(text, entries)
            case ToolCallMade():
                return self._close() + self._call(event)
            case Finished():
                return self._close() + self._finish(event)
            case ServerToolsListed():
                return self._close() + self.server.listed(event)
            case ServerToolCall():
                return self._close() + self.server.call(event)
            case ServerToolResult():
                return self.server.result(event)
            case ServerToolApproval():
                return self._close() + self.server.approval(event)
        return b""

    def _index(self) -> int:
        return len(self.response["output"]) - 1

    def _switch(self, kind: str) -> bytes:
        if self._open is not None and self._open["type"] == kind:
            return b""
        out = self._close()
        if kind == "reasoning":
            item: dict[str, Any] = {
                "id": new_id("rs"),
                "type": "reasoning",
                "summary": [],
                "content": [],
                "status": "in_progress",
            }
            part: dict[str, Any] = {"type": "reasoning_text", "text": ""}
        else:
            item = {
                "id": new_id("msg"),
                "type": "message",
                "role": "assistant",
                "status": "in_progress",
                "content": [],
            }
            part = {"type": "output_text", "text": "", "annotations": []}
            if self.logprobs:
                part["logprobs"] = []
        self.response["output"].append(item)
        self._open, self._text = item, ""
        out += self._event("response.output_item.added", output_index=self._index(), item=item)
        out += self._event(
            "response.content_part.added",
            item_id=item["id"],
            output_index=self._index(),
            content_index=0,
            part=part,
        )
        return out

    def _delta(self, text: str, entries: list[TokenLogprob]) -> bytes:
        assert self._open is not None
        self._text += text
        if self._open["type"] == "reasoning":
            kind, extra = "response.reasoning_text.delta", {}
        else:
            self._entries += entries
            kind = "response.output_text.delta"
            extra = {"logprobs": _logprobs(entries) if self.logprobs else []}
        if not text and not extra.get("logprobs"):
            return b""
        return self._event(
            kind,
            item_id=self._open["id"],
            output_index=self._index(),
            content_index=0,
            delta=text,
            **extra,
        )

    def _close(self, status: str = "completed") -> bytes:
        item, self._open = self._open, None
        if item is None:
            return b""
        where = {"item_id": item["id"], "output_index": self._index(), "content_index": 0}
        if item["type"] == "reasoning":
            part: dict[str, Any] = {"type": "reasoning_text", "text": self._text}
            out = self._event("response.reasoning_text.done", **where, text=self._text)
        else:
            part = {"type": "output_text", "text": self._text, "annotations": []}
            if self.logprobs:
                part["logprobs"] = _logprobs(self._entries)
            done_logprobs = part.get("logprobs", [])
            out = self._event(
                "response.output_text.done", **where, text=self._text, logprobs=done_logprobs
            )
            self._entries = []
        out += self._event("response.content_part.done", **where, part=part)
        item["content"] = [part]
        item["status"] = status
        return out + self._event("response.output_item.done", output_index=self._index(), item=item)

    def _call(self, call: ToolCallMade) -> bytes:
        namespace, name = self.origin(call.name)
        item: dict[str, Any] = {
            "id": new_id("fc"),
            "type": "function_call",
            "call_id": call.id,
            "name": name,
            "arguments": "",
            "status": "in_progress",
        }
        if namespace is not None:
            item["namespace"] = namespace
        self.response["output"].append(item)
        index = self._index()
        out = self._event("response.output_item.added", output_index=index, item=dict(item))
        out += self._event(
            "response.function_call_arguments.delta",
            item_id=item["id"],
            output_index=index,
            delta=call.arguments,
        )
        out += self._event(
            "response.function_call_arguments.done",
            item_id=item["id"],
            output_index=index,
            name=name,
            arguments=call.arguments,
        )
        item["arguments"], item["status"] = call.arguments, "completed"
        return out + self._event("response.output_item.done", output_index=index, item=item)

    def _finish(self, finish: Finished) -> bytes:
        response = self.response
        response["usage"] = usage_object(finish.usage, finish.reasoning_tokens)
        if finish.reason == "length":
            response["status"] = "incomplete"
            response["incomplete_details"] = {"reason": "max_output_tokens"}
            for item in response["output"]:
                if item["type"] == "message":
                    item["status"] = "incomplete"
            return self._event("response.incomplete", response=response)
        response["status"] = "completed"
        return self._event("response.completed", response=response)

    def fail(self, message: str, code: str | None) -> bytes:
        """The ``response.failed`` event of a stream whose generation failed."""
        self._open = None
        self.response["status"] = "failed"
        self.response["error"] = {"code": code or "server_error", "message": message}
        return self._event("response.failed", response=self.response)
