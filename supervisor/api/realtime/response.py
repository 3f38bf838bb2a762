"""One response of a Realtime conversation: the lm writes, the tts worker speaks.

The conversation goes to the lm as one chat turn (:class:`~...engine.turns.Turn`:
the model's tool-call parsing, thinking split off, its batching). Its text comes
out as ``response.output_text.delta`` (text sessions) or as
``response.output_audio_transcript.delta`` (audio sessions), where each sentence,
as soon as it is complete, is queued to the tts worker: the first sentence is
spoken while the lm writes the next, and its audio goes out as
``response.output_audio.delta`` in the chunks the worker encodes them (in the
session's output format). A tool call is a ``function_call`` item with its
arguments (``response.function_call_arguments.delta`` / ``.done``).

Cancelling the run's task (``response.cancel``, barge-in) closes the turn and the
synthesis, which cancels both on their workers at their next step, and ends the
response ``cancelled``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from msgspec import UNSET, Struct, UnsetType

from mlx_gateway.protocol.messages import Synthesize, Usage
from mlx_gateway.supervisor.api.realtime.audio import AudioFormat
from mlx_gateway.supervisor.api.realtime.conversation import (
    Conversation,
    Item,
    ItemObject,
    Part,
    new_id,
)
from mlx_gateway.supervisor.api.realtime.events import JsonObject
from mlx_gateway.supervisor.api.realtime.latency import TurnClock
from mlx_gateway.supervisor.api.realtime.outbox import ClientGone, Outbox
from mlx_gateway.supervisor.config.kinds.tts import TtsConfig
from mlx_gateway.supervisor.engine.requests import SamplingFields
from mlx_gateway.supervisor.engine.sentences import SentenceBuffer
from mlx_gateway.supervisor.engine.synthesis import Speech
from mlx_gateway.supervisor.engine.tools import Function, ToolSpec
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.http.caller import ANONYMOUS, Caller
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.reply.serve import (
    Ask,
    Finished,
    McpServers,
    TextDelta,
    TextModel,
    ToolCallMade,
    open_turn,
)


@dataclass
class Plan:
    """What one response is asked to be (the session's settings, overridden by
    ``response.create``'s ``response``)."""

    instructions: str
    modalities: list[str]
    voice: str | None
    speed: float
    output_format: AudioFormat
    tools: list[Function]
    tool_choice: str
    temperature: float | None
    max_output_tokens: int | None
    into_conversation: bool = True
    """``conversation: none``: an out-of-band response, its items not added."""
    input: list[Item] | None = None
    """The items it reads instead of the conversation (``input``)."""
    metadata: JsonObject | None = None


class StatusDetails(Struct):
    type: str
    reason: str | UnsetType = UNSET
    error: JsonObject | UnsetType = UNSET


class InputTokens(Struct):
    text_tokens: int
    audio_tokens: int
    cached_tokens: int


class OutputTokens(Struct):
    text_tokens: int
    audio_tokens: int


class UsageObject(Struct):
    total_tokens: int
    input_tokens: int
    output_tokens: int
    input_token_details: InputTokens
    output_token_details: OutputTokens


class ResponseObject(Struct, kw_only=True):
    """A response as the server writes it (``response.created`` / ``.done``)."""

    id: str
    object: str = "realtime.response"
    status: str
    status_details: StatusDetails | None
    output: list[ItemObject]
    conversation_id: str | None
    output_modalities: list[str]
    modalities: list[str]
    max_output_tokens: int | str
    metadata: JsonObject | None
    usage: UsageObject


def response_ask(lm: TextModel, plan: Plan, messages: list[dict[str, Any]]) -> Ask:
    """The lm's turn for one response: the conversation as chat ``messages``, the
    plan's tools and sampling (the one place realtime asks the engine for a turn)."""
    # one call per response: a voice agent answers each before it speaks on
    tools = ToolSpec(plan.tools, plan.tool_choice if plan.tools else "auto", parallel=False)
    fields = SamplingFields(
        model=lm.name, max_tokens=plan.max_output_tokens, temperature=plan.temperature
    )
    return Ask(
        model=lm.name,
        endpoint="/v1/realtime",
        sampling=fields,
        messages=messages,
        enable_thinking=False,
        tools=tools,
        id_prefix="rt-",
    )


@dataclass
class Spoken:
    """Audio sent so far, to tell how much of it the client has played."""

    first_at: float | None = None
    ms: int = 0


@dataclass
class ResponseRun:
    out: Outbox
    conversation: Conversation
    lm: TextModel
    tts: ModelHandle | None
    plan: Plan
    mcp: McpServers
    """The config's MCP servers, which the server tools in the caller's scope run on."""
    caller: Caller = ANONYMOUS
    """The session's app: the server tools in its scope run in responses."""
    id: str = field(default_factory=lambda: new_id("resp"))
    status: str = "in_progress"
    reason: str | None = None
    """Why it was cancelled: ``client_cancelled`` or ``turn_detected``."""
    output: list[Item] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    message: Item | None = None
    spoken: Spoken = field(default_factory=Spoken)
    error: GatewayError | None = None
    clock: TurnClock = field(default_factory=TurnClock)
    """Its stages' times from the end of the user's turn it answers."""

    @property
    def status_code(self) -> int:
        """Its status as an HTTP one (usage rows): 200 when it completed (or hit
        its token limit), the error's status when it failed, 499 when cancelled or
        its client left."""
        if self.status in ("completed", "incomplete"):
            return 200
        if self.status == "failed" and self.error is not None:
            return self.error.status
        return 499

    @property
    def audio(self) -> bool:
        return "audio" in self.plan.modalities and self.tts is not None

    def object(self) -> ResponseObject:
        details = None
        if self.status == "cancelled":
            details = StatusDetails("cancelled", reason=self.reason or "client_cancelled")
        elif self.status == "failed" and self.error is not None:
            details = StatusDetails("failed", error=self.error.body()["error"])
        elif self.status == "incomplete":
            details = StatusDetails("incomplete", reason="max_output_tokens")
        usage = self.usage
        return ResponseObject(
            id=self.id,
            status=self.status,
            status_details=details,
            output=[item.rendered(self.out.beta) for item in self.output],
            conversation_id="conv_default" if self.plan.into_conversation else None,
            output_modalities=self.plan.modalities,
            modalities=self.plan.modalities,
            max_output_tokens=self.plan.max_output_tokens or "inf",
            metadata=self.plan.metadata,
            usage=UsageObject(
                total_tokens=usage.prompt_tokens + usage.completion_tokens,
                input_tokens=usage.prompt_tokens,
                output_tokens=usage.completion_tokens,
                input_token_details=InputTokens(usage.prompt_tokens, 0, usage.cached_tokens),
                output_token_details=OutputTokens(usage.completion_tokens, 0),
            ),
        )

    # ------------------------------------------------------------ the run

    async def run(self) -> None:
        """The whole response, from ``response.created`` to ``response.done``; never
        raises but :class:`ClientGone`."""
        speaker: asyncio.Task[None] | None = None
        sentences: asyncio.Queue[str | None] = asyncio.Queue()
        try:
            await self.out.send("response.created", response=self.object())
            if self.audio:
                speaker = asyncio.ensure_future(self._speak(sentences))
            finish = await self._write(sentences)
            if speaker is not None:
                await sentences.put(None)
                await speaker
            self.status = "incomplete" if finish == "length" else "completed"
        except asyncio.CancelledError:
            self.status = "cancelled"
        except GatewayError as exc:
            self.status, self.error = "failed", exc
        finally:
            if speaker is not None and not speaker.done():
                speaker.cancel()
                with contextlib.suppress(BaseException):
                    await speaker
        self.clock.report(self.id)
        await self._close_message()
        if self.error is not None:
            await self.out.error(self.error)
        await self.out.send("response.done", response=self.object())

    async def _write(self, sentences: asyncio.Queue[str | None]) -> str:
        """Run the lm's turn; returns its finish reason."""
        plan = self.plan
        if plan.input is not None:
            source = Conversation()
            source.items = plan.input
        else:
            source = self.conversation
        messages = await source.messages(plan.instructions)
        self.clock.mark("transcribed")
        ask = response_ask(self.lm, plan, messages)
        running = await open_turn(self.mcp, self.lm, ask, self.caller)
        buffer = SentenceBuffer()
        finish = "stop"
        try:
            async for event in running.choice(0):
                match event:
                    case TextDelta(text=text) if text:
                        self.clock.mark("first_token")
                        await self._text(text)
                        if self.audio:
                            for sentence in buffer.add(text):
                                self.clock.mark("first_sentence")
                                await sentences.put(sentence)
                    case ToolCallMade():
                        await self._call(event)
                    case Finished(reason=reason, usage=usage):
                        finish, self.usage = reason, usage
        finally:
            await running.aclose()
        rest = buffer.finish()
        if rest and self.audio:
            self.clock.mark("first_sentence")
            await sentences.put(rest)
        return finish

    # ------------------------------------------------------------ the message item

    async def _open_message(self) -> Item:
        if self.message is not None:
            return self.message
        part = Part("output_audio" if self.audio else "output_text", "")
        item = Item(new_id("item"), "message", role="assistant", content=[part])
        item.status = "in_progress"
        self.message = item
        await self._add(item)
        await self.out.send(
            "response.content_part.added",
            response_id=self.id,
            item_id=item.id,
            output_index=self.output.index(item),
            content_index=0,
            part=part.event_part(),
        )
        return item

    async def _add(self, item: Item) -> None:
        """``item`` becomes the response's next output (and the conversation's)."""
        self.output.append(item)
        previous = None
        if self.plan.into_conversation:
            previous = self.conversation.add(item)
        rendered = item.rendered(self.out.beta)
        index = len(self.output) - 1
        await self.out.send(
            "response.output_item.added", response_id=self.id, output_index=index, item=rendered
        )
        if self.plan.into_conversation:
            await self.out.send("conversation.item.added", previous_item_id=previous, item=rendered)

    async def _text(self, text: str) -> None:
        item = await self._open_message()
        part = item.content[0]
        part.text = (part.text or "") + text
        kind = (
            "response.output_audio_transcript.delta"
            if self.audio
            else ("response.output_text.delta")
        )
        await self.out.send(kind, **self._where(item), delta=text)

    def _where(self, item: Item) -> dict[str, str | int]:
        return {
            "response_id": self.id,
            "item_id": item.id,
            "output_index": self.output.index(item),
            "content_index": 0,
        }

    async def _close_message(self) -> None:
        item = self.message
        if item is None:
            return
        item.status = "completed" if self.status == "completed" else "incomplete"
        part = item.content[0]
        with contextlib.suppress(ClientGone):
            if self.audio:
                await self.out.send("response.output_audio.done", **self._where(item))
                await self.out.send(
                    "response.output_audio_transcript.done",
                    **self._where(item),
                    transcript=part.text,
                )
            else:
                await self.out.send(
                    "response.output_text.done", **self._where(item), text=part.text
                )
            await self.out.send(
                "response.content_part.done", **self._where(item), part=part.event_part()
            )
            await self._item_done(item)

    async def _item_done(self, item: Item) -> None:
        rendered = item.rendered(self.out.beta)
        await self.out.send(
            "response.output_item.done",
            response_id=self.id,
            output_index=self.output.index(item),
            item=rendered,
        )
        if self.plan.into_conversation:
            await self.out.send("conversation.item.done", item=rendered)

    # ------------------------------------------------------------ tool calls

    async def _call(self, call: ToolCallMade) -> None:
        item = Item(
            new_id("item"),
            "function_call",
            call_id=call.id,
            name=call.name,
            arguments="",
            status="in_progress",
        )
        await self._add(item)
        where = self._where(item)
        del where["content_index"]
        where["call_id"] = call.id
        await self.out.send("response.function_call_arguments.delta", **where, delta=call.arguments)
        item.arguments, item.status = call.arguments, "completed"
        await self.out.send(
            "response.function_call_arguments.done",
            **where,
            name=call.name,
            arguments=call.arguments,
        )
        await self._item_done(item)

    # ------------------------------------------------------------ speech

    async def _speak(self, sentences: asyncio.Queue[str | None]) -> None:
        """Synthesize each queued sentence in turn, relaying its audio as it comes."""
        assert self.tts is not None
        plan = self.plan
        while (sentence := await sentences.get()) is not None:
            item = await self._open_message()
            config = self.tts.config
            assert isinstance(config, TtsConfig), "the route checked its kind"
            msg = Synthesize(
                request_id=f"rt-{uuid4().hex}",
                input=sentence[: config.max_input_chars],
                voice=plan.voice,
                speed=plan.speed,
                response_format=plan.output_format.worker_format,
            )
            speech = await Speech.start(self.tts, msg)
            try:
                async for data in speech.chunks():
                    if self.spoken.first_at is None:
                        self.spoken.first_at = time.monotonic()
                        self.clock.mark("first_audio")
                    self.spoken.ms += plan.output_format.ms(len(data))
                    await self.out.send(
                        "response.output_audio.delta",
                        **self._where(item),
                        delta=base64.b64encode(data).decode("ascii"),
                    )
            finally:
                await speech.aclose()
            item.sentences.append(sentence)
            item.audio_ms.append(self.spoken.ms)

    def played_ms(self) -> int:
        """How much of the audio the client has played by now, at the latest: what
        was sent, and no more than the time since the first audio went out."""
        if self.spoken.first_at is None:
            return 0
        elapsed = int((time.monotonic() - self.spoken.first_at) * 1000)
        return min(self.spoken.ms, elapsed)
