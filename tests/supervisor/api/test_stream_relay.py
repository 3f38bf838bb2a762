"""The SSE hot path: per-token events from a template, and one write per wake-up."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec
import pytest
from msgspec import UNSET

from mlx_gateway.protocol.messages import Cancel, Chunk, Done, Error, Started, Usage
from mlx_gateway.supervisor.api.chat.objects import ChatChunkOut, ChunkChoiceOut, DeltaOut
from mlx_gateway.supervisor.api.chat.stream import ChatEvents
from mlx_gateway.supervisor.api.completions.routes import CompletionEvents
from mlx_gateway.supervisor.engine.generation import Generation
from mlx_gateway.supervisor.engine.objects import Completion, CompletionChoice
from mlx_gateway.supervisor.http import sse
from mlx_gateway.supervisor.pool.worker_call import WorkerCall
from mlx_gateway.supervisor.reply.streaming import relay

TEXTS = ["", "hé", 'say "hi"\n\\ok', "\u2028 line sep", "🦊", "\x00"]


@pytest.mark.parametrize("include_usage", [False, True])
@pytest.mark.parametrize("text", TEXTS)
def test_chat_content_event_equals_the_encoded_object(text: str, include_usage: bool) -> None:
    events = ChatEvents("chatcmpl-1", 7, "org/m", include_usage)
    expected = sse.data(
        ChatChunkOut(
            id="chatcmpl-1",
            created=7,
            model="org/m",
            choices=[ChunkChoiceOut(index=0, delta=DeltaOut(content=text))],
            usage=None if include_usage else UNSET,
        )
    )
    assert events.content(text) == expected


@pytest.mark.parametrize("text", TEXTS)
def test_completion_content_event_equals_the_encoded_object(text: str) -> None:
    events = CompletionEvents("cmpl-1", 7, "m", include_usage=False)
    expected = sse.data(
        Completion(
            id="cmpl-1",
            created=7,
            model="m",
            choices=[CompletionChoice(index=0, text=text)],
            usage=UNSET,
        )
    )
    assert events.content(text) == expected


def test_a_template_needs_exactly_one_hole() -> None:
    with pytest.raises(ValueError):
        sse.Template({"a": "no hole"})
    with pytest.raises(ValueError):
        sse.Template({"a": sse.HOLE, "b": sse.HOLE})


class PiledUp:
    """A reply stream whose replies arrive in bursts: each ``__anext__`` waits for
    one, and the rest of its burst is already there for ``take_ready``."""

    def __init__(self, *bursts: list[Any]) -> None:
        self._bursts = deque(deque(b) for b in bursts)
        self._ready: deque[Any] = deque()
        self.closed = False

    async def __anext__(self) -> Any:
        if not self._ready:
            if not self._bursts:
                raise StopAsyncIteration
            self._ready = self._bursts.popleft()
        return self._ready.popleft()

    def take_ready(self) -> Any | None:
        return self._ready.popleft() if self._ready else None

    async def aclose(self) -> None:
        self.closed = True


def chunk(text: str) -> Chunk:
    return Chunk(request_id="r", text=text, tokens=1)


def payloads(writes: list[bytes]) -> list[list[Any]]:
    """Each write's events, decoded (``[DONE]`` kept as a string)."""
    out = []
    for write in writes:
        events = []
        for event in write.split(b"\n\n")[:-1]:
            body = event.removeprefix(b"data: ")
            events.append("[DONE]" if body == b"[DONE]" else msgspec.json.decode(body))
        out.append(events)
    return out


class OneCall:
    """A handle whose session's one call answers with ``replies``."""

    def __init__(self, replies: Any) -> None:
        self.replies = replies

    @contextlib.asynccontextmanager
    async def session(self, priority: str = "interactive") -> AsyncIterator[OneCall]:
        yield self

    def call(self, msg: Any, request_id: str, payloads: Sequence[Any] = ()) -> Any:
        return self.replies


async def generation_of(replies: Any) -> Generation:
    """A generation reading ``replies`` through a real worker call, past its Started."""
    call = WorkerCall(OneCall(replies), Cancel(request_id="r"))
    await call.open()
    return Generation(call, Started(request_id="r", prompt_tokens=3))


async def collect(stream: PiledUp, include_usage: bool = True) -> list[bytes]:
    generation = await generation_of(stream)
    events = ChatEvents("chatcmpl-1", 7, "m", include_usage)
    return [write async for write in relay(generation, events)]


async def test_chunks_that_piled_up_leave_in_one_write() -> None:
    done = Done(request_id="r", finish_reason="length", usage=Usage(3, 5, 2))
    stream = PiledUp(
        [chunk("a")], [chunk("b"), chunk("c"), chunk("")], [chunk("d"), chunk("e"), done]
    )
    writes = await collect(stream)
    decoded = payloads(writes)
    assert [len(events) for events in decoded] == [1, 1, 1, 4]
    assert decoded[0][0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert decoded[1][0]["choices"][0]["delta"] == {"content": "a"}
    assert decoded[2][0]["choices"][0]["delta"] == {"content": "bc"}
    last = decoded[3]
    assert last[0]["choices"][0]["delta"] == {"content": "de"}
    assert last[1]["choices"][0]["finish_reason"] == "length"
    assert last[2]["usage"]["prompt_tokens_details"] == {"cached_tokens": 2}
    assert last[3] == "[DONE]"
    assert stream.closed


async def test_an_error_after_piled_up_chunks_still_sends_them() -> None:
    failure = Error(request_id="r", message="boom", status=500)
    stream = PiledUp([chunk("a"), chunk("b"), failure])
    decoded = payloads(await collect(stream, include_usage=False))
    assert decoded[1][0]["choices"][0]["delta"] == {"content": "ab"}
    assert decoded[2][0]["error"]["message"] == "boom"
    assert decoded[2][1] == "[DONE]"
    assert stream.closed


class Dripping:
    """Replies that arrive one by one, a few milliseconds apart, as a worker's do.

    Each reply is due ``gap`` after the previous one was handed out (not on a fixed
    schedule), so a busy machine that delays the reader does not pile them up."""

    def __init__(self, *replies: Any, gap: float = 0.005) -> None:
        self._gap = gap
        self._replies = deque(replies)
        self._last = asyncio.get_running_loop().time()

    def _hand_out(self) -> Any:
        self._last = asyncio.get_running_loop().time()
        return self._replies.popleft()

    async def __anext__(self) -> Any:
        if not self._replies:
            raise StopAsyncIteration
        gap = self._last + self._gap - asyncio.get_running_loop().time()
        await asyncio.sleep(max(0.0, gap))  # not a wait: the fake stream's pacing
        return self._hand_out()

    def take_ready(self) -> Any | None:
        if self._replies and asyncio.get_running_loop().time() >= self._last + self._gap:
            return self._hand_out()
        return None

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize(("interval", "contents"), [(0.0, ["a", "b", "c"]), (1.0, ["a", "bc"])])
async def test_writes_keep_the_stream_interval(interval: float, contents: list[str]) -> None:
    done = Done(request_id="r", finish_reason="stop", usage=Usage(3, 3))
    stream = Dripping(chunk("a"), chunk("b"), chunk("c"), done)
    generation = await generation_of(stream)
    generation.stream_interval = interval
    events = ChatEvents("chatcmpl-1", 7, "m", include_usage=False)
    writes = [write async for write in relay(generation, events)]
    sent = [
        event["choices"][0]["delta"].get("content")
        for events_of_write in payloads(writes[1:])
        for event in events_of_write
        if event != "[DONE]" and event["choices"][0]["finish_reason"] is None
    ]
    # The first content goes out at once; with a long interval the rest waits and
    # leaves as one event (here: with the finish, as the stream ended meanwhile).
    assert sent == contents
