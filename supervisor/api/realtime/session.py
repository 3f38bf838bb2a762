"""One Realtime session: the client's events in, the server's events out.

Every client event is handled in order; a wrong one is answered with an ``error``
event naming it (its ``event_id`` echoed) and changes nothing, and the session goes
on. Work that takes time runs beside the event loop, so that audio keeps being
read while a response is written: the transcription of each committed turn, and
at most one response at a time.

Barge-in: with ``server_vad`` or ``semantic_vad`` (``interrupt_response``), speech
that starts while a response runs cancels it (the lm and the tts worker stop at
their next step) and its assistant item is truncated to the audio the client can
have played.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, assert_never

from msgspec import UNSET
from starlette.types import Message
from starlette.websockets import WebSocket

from mlx_gateway.supervisor.api.realtime import events
from mlx_gateway.supervisor.api.realtime import settings as fields
from mlx_gateway.supervisor.api.realtime.audio import AudioFormat
from mlx_gateway.supervisor.api.realtime.conversation import (
    Conversation,
    Item,
    Part,
    decode_base64,
    new_id,
    parse_item,
)
from mlx_gateway.supervisor.api.realtime.events import BetaSession, GaSession
from mlx_gateway.supervisor.api.realtime.hearing import (
    EarlyTranscription,
    InputBuffer,
    Listening,
    pending,
    transcribe,
)
from mlx_gateway.supervisor.api.realtime.latency import TurnClock
from mlx_gateway.supervisor.api.realtime.outbox import ClientGone, Outbox
from mlx_gateway.supervisor.api.realtime.response import Plan, ResponseRun
from mlx_gateway.supervisor.api.realtime.settings import Settings, Transcription
from mlx_gateway.supervisor.api.realtime.truncate import truncate_audio
from mlx_gateway.supervisor.api.realtime.vad import SpeechPaused, SpeechResumed, SpeechStarted
from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.gateway import Gateway
from mlx_gateway.supervisor.http.caller import ANONYMOUS, Caller
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.reply.serve import TextModel

log = logging.getLogger("mlx_gateway.realtime")


@dataclass
class Models:
    """The workers a session uses (resolved by the route)."""

    lm: TextModel | None
    whisper: Callable[[str | None], ModelHandle]
    """The whisper model a transcription names (``None``: the default one)."""
    tts: ModelHandle | None
    gateway: Gateway
    """The gateway's services: its MCP servers (a model entry's ``server_tools`` run in
    responses), its recorder (each response is counted as a request)."""
    caller: Caller = ANONYMOUS
    """The app whose key opened the session (its usage rows, its tools' scope)."""


class RealtimeSession:
    def __init__(self, out: Outbox, settings: Settings, models: Models) -> None:
        self.out = out
        self.settings = settings
        self.models = models
        self.id = new_id("sess")
        self.conversation = Conversation()
        self.buffer = InputBuffer(settings.input_format)
        self.buffer.configure(settings.input_format, settings.turn_detection)
        self.response: ResponseRun | None = None
        self._response_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._speech_item: str | None = None
        self._early = EarlyTranscription(self.id)
        self._turn = TurnClock()
        """The end of the last audio turn, for the response that answers it."""

    @property
    def beta(self) -> bool:
        return self.out.beta

    # ------------------------------------------------------------ the loop

    async def run(self, websocket: WebSocket) -> None:
        try:
            created = "session.created"
            await self.out.send(created, session=fields.rendered(self.settings, self.id, self.beta))
            if self.beta and self.settings.kind == "realtime":
                conversation = {"id": "conv_default", "object": "realtime.conversation"}
                await self.out.send("conversation.created", conversation=conversation)
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                await self._message(message)
        except ClientGone:
            return
        finally:
            await self.close()

    async def _message(self, message: Message) -> None:
        event_id = None
        try:
            text = message.get("text")
            if text is None:
                raise BadRequest(
                    "Binary frames are not events: send JSON text frames.",
                    code="invalid_event",
                )
            event = events.decode(text, self.beta)
            event_id = event.event_id
            await self._event(event)
        except events.BadEvent as exc:
            await self.out.error(exc, exc.event_id)
        except GatewayError as exc:
            await self.out.error(exc, event_id)

    async def _event(self, event: events.Event) -> None:
        match event:
            case events.SessionUpdate(session=session):
                await self._session_update(event, session)
            case events.AudioAppend(audio=audio):
                await self._append(decode_base64(audio, "audio"))
            case events.AudioCommit():
                await self._commit()
            case events.AudioClear():
                await self._clear()
            case events.ItemCreate(item=item, previous_item_id=previous):
                await self._item_create(event, item, previous)
            case events.ItemDelete(item_id=item_id):
                self.conversation.delete(item_id)
                await self.out.send("conversation.item.deleted", item_id=item_id)
            case events.ItemRetrieve(item_id=item_id):
                found = self.conversation.get(item_id)
                await self.out.send("conversation.item.retrieved", item=found.rendered(self.beta))
            case events.ItemTruncate():
                await self._item_truncate(event)
            case events.ResponseCreate(response=response):
                await self._response_create(event, response or events.ResponseFields())
            case events.ResponseCancel(response_id=wanted):
                await self._response_cancel(wanted)
            case events.OutputAudioClear():
                self._webrtc_only(event)
            case _:
                assert_never(event)

    # ------------------------------------------------------------ session

    async def _session_update(
        self, event: events.ClientEvent, session: GaSession | BetaSession | None
    ) -> None:
        transcription_event = isinstance(event, events.TranscriptionSessionUpdate)
        new = fields.updated(self.settings, session, self.beta)
        if transcription_event and new.kind != "transcription":
            raise BadRequest(
                "transcription_session.update is for transcription sessions "
                "(?intent=transcription); use session.update.",
                code="invalid_event",
            )
        if new.transcription is not None and new.transcription.model:
            try:
                self.models.whisper(new.transcription.model)  # 404 before anything changes
            except GatewayError as exc:
                flat = "session.input_audio_transcription"
                exc.param = f"{flat if self.beta else 'session.audio.input.transcription'}.model"
                raise
        self.settings = new
        self._early.drop("session updated")
        self.buffer.configure(new.input_format, new.turn_detection)
        kind = "transcription_session.updated" if transcription_event else "session.updated"
        await self.out.send(kind, session=fields.rendered(new, self.id, self.beta))

    def _webrtc_only(self, event: events.ClientEvent) -> None:
        raise BadRequest(
            f"{event.type} is for WebRTC and SIP connections; over a WebSocket the "
            "client plays the audio and truncates the item itself.",
            param="type",
            code="unsupported_event",
        )

    # ------------------------------------------------------------ input audio

    async def _append(self, data: bytes) -> None:
        for vad_event in self.buffer.append(data):
            if isinstance(vad_event, SpeechStarted):
                await self._speech_started(vad_event.audio_start_ms)
            elif isinstance(vad_event, SpeechPaused):
                self._transcribe_early(vad_event.audio_end_ms)
            elif isinstance(vad_event, SpeechResumed):
                self._early.drop("the speech went on")
            else:
                item_id = self._speech_item or new_id("item")
                self._speech_item = None
                vad_ms = self.buffer.total_ms - vad_event.audio_end_ms
                self._turn = TurnClock(time.monotonic(), max(0, vad_ms))
                await self.out.send(
                    "input_audio_buffer.speech_stopped",
                    audio_end_ms=vad_event.audio_end_ms,
                    item_id=item_id,
                )
                await self._commit_buffer(item_id, vad_event.audio_end_ms)
                vad = self.settings.turn_detection
                if vad is not None and vad.create_response and self.settings.kind == "realtime":
                    await self._start_response(self._plan(events.ResponseFields()))

    def _transcribe_early(self, end_ms: int) -> None:
        """The turn may end at ``end_ms``: start transcribing what it would commit."""
        if not self.settings.early_transcription or self._speech_item is None:
            return
        with contextlib.suppress(GatewayError):  # no whisper model: the commit says so
            hearing = self._hearing()
            self._early.start(self._speech_item, *hearing, self.buffer.peek(end_ms))

    async def _speech_started(self, audio_start_ms: int) -> None:
        self.buffer.drop_before(audio_start_ms)
        self._speech_item = new_id("item")
        await self.out.send(
            "input_audio_buffer.speech_started",
            audio_start_ms=audio_start_ms,
            item_id=self._speech_item,
        )
        vad = self.settings.turn_detection
        if self.response is not None and vad is not None and vad.interrupt_response:
            await self._cancel_response("turn_detected")

    async def _commit(self) -> None:
        self._turn = TurnClock(time.monotonic())
        await self._commit_buffer(self._speech_item or new_id("item"), None)
        self._speech_item = None
        if self.buffer.vad is not None:
            self.buffer.vad.reset()

    async def _commit_buffer(self, item_id: str, end_ms: int | None) -> None:
        audio = self.buffer.take(end_ms)
        early = self._early.run and self._early.take(item_id, audio, *self._hearing())
        item = Item(item_id, "message", role="user")
        item.content = [Part("input_audio")]
        item.audio = audio
        pending(item)
        previous = self.conversation.add(item)
        await self.out.send(
            "input_audio_buffer.committed", previous_item_id=previous, item_id=item.id
        )
        await self._item_added(item, previous, early)

    async def _clear(self) -> None:
        self.buffer.clear()
        self._early.drop("buffer cleared")
        self._speech_item = None
        await self.out.send("input_audio_buffer.cleared")

    # ------------------------------------------------------------ the conversation

    def _hearing(self) -> tuple[ModelHandle, AudioFormat, Transcription | None]:
        """What the user's audio is transcribed by: the whisper model, the audio's
        format, the session's transcription settings."""
        s = self.settings
        model = s.transcription.model if s.transcription else None
        return self.models.whisper(model), s.input_format, s.transcription

    async def _item_added(
        self, item: Item, previous: str | None, early: Listening | None = None
    ) -> None:
        rendered = item.rendered(self.beta)
        await self.out.send("conversation.item.added", previous_item_id=previous, item=rendered)
        if item.audio:
            settings = self.settings
            report = settings.transcription is not None or settings.kind == "transcription"
            run = early or Listening(*self._hearing(), item.audio)
            task = self._spawn(transcribe(self.out, item, run, report))
            task.add_done_callback(lambda _: run.cancel())  # even if it never started
        else:
            await self.out.send("conversation.item.done", item=rendered)

    async def _item_create(
        self, event: events.ClientEvent, data: events.ItemFields, previous_item_id: str | None
    ) -> None:
        self._conversation_only(event)
        item = parse_item(data)
        if item.audio:
            self.models.whisper(None)  # a 404 now, before the item is added
            pending(item)
        previous = self.conversation.add(item, previous_item_id)
        await self._item_added(item, previous)

    async def _item_truncate(self, event: events.ItemTruncate) -> None:
        item = self.conversation.get(event.item_id)
        end = event.audio_end_ms
        if end < 0:
            raise BadRequest("'audio_end_ms' must be a non-negative integer.", param="audio_end_ms")
        if event.content_index != 0:
            raise BadRequest("Only content_index 0 can be truncated.", param="content_index")
        truncate_audio(item, end)
        await self.out.send(
            "conversation.item.truncated", item_id=item.id, content_index=0, audio_end_ms=end
        )

    def _conversation_only(self, event: events.ClientEvent) -> None:
        if self.settings.kind != "realtime":
            raise BadRequest(
                f"{event.type} is not available in a transcription session.",
                param="type",
                code="invalid_event",
            )

    # ------------------------------------------------------------ responses

    def _plan(self, request: events.ResponseFields) -> Plan:
        s = self.settings
        plan = Plan(
            instructions=s.instructions,
            modalities=s.modalities,
            voice=s.voice,
            speed=s.speed,
            output_format=s.output_format,
            tools=s.tools,
            tool_choice=s.tool_choice,
            temperature=s.temperature,
            max_output_tokens=s.max_output_tokens,
        )
        p = "response"
        if request.instructions is not None:
            plan.instructions = request.instructions
        if request.modalities is not UNSET:
            plan.modalities = fields.modalities(request.modalities, f"{p}.modalities")
        if request.output_modalities is not UNSET:
            param = f"{p}.output_modalities"
            plan.modalities = fields.modalities(request.output_modalities, param)
        if request.voice is not UNSET:
            plan.voice = fields.voice(request.voice)
        if request.tools is not UNSET:
            plan.tools = fields.tools(request.tools, f"{p}.tools")
        if request.tool_choice is not UNSET:
            plan.tool_choice = fields.tool_choice(
                request.tool_choice, plan.tools, f"{p}.tool_choice"
            )
        for key, value in (
            ("max_output_tokens", request.max_output_tokens),
            ("max_response_output_tokens", request.max_response_output_tokens),
        ):
            if value is not UNSET:
                plan.max_output_tokens = fields.max_tokens(value, f"{p}.{key}")
        if request.temperature is not UNSET:
            plan.temperature = request.temperature
        if request.conversation == "none":
            plan.into_conversation = False
        if request.input is not None:
            plan.input = [
                self.conversation.get(i.id, "response.input")
                if i.type == "item_reference"
                else parse_item(i)
                for i in request.input
            ]
        plan.metadata = request.metadata
        return plan

    async def _response_create(
        self, event: events.ClientEvent, request: events.ResponseFields
    ) -> None:
        self._conversation_only(event)
        plan = self._plan(request)
        if self.response is not None:
            raise BadRequest(
                f"Conversation already has an active response in progress: {self.response.id}. "
                "Wait until the response is finished before creating a new one.",
                code="conversation_already_has_active_response",
            )
        await self._start_response(plan)

    async def _start_response(self, plan: Plan) -> None:
        if self.response is not None:  # server VAD: one response at a time
            return
        models = self.models
        if models.lm is None:
            raise BadRequest("This session has no language model.", param="model")
        run = ResponseRun(
            self.out,
            self.conversation,
            models.lm,
            models.tts,
            plan,
            models.gateway.mcp,
            models.caller,
        )
        run.clock, self._turn = self._turn, TurnClock()  # the first answer of a turn
        self.response = run

        async def go() -> None:
            try:
                await self._recorded(run)
            finally:
                if self.response is run:
                    self.response = None

        self._response_task = self._spawn(go())

    async def _recorded(self, run: ResponseRun) -> None:
        """Run ``run``, counted in ``/metrics`` and a usage row as a request would be."""
        recorder = self.models.gateway.recorder
        with recorder.recording("/v1/realtime", self.models.caller.name) as record:
            try:
                await run.run()
            finally:
                record.model = run.lm.name  # not the tts model that spoke it
                record.status = run.status_code

    async def _response_cancel(self, wanted: str | None) -> None:
        if self.response is None or (wanted and wanted != self.response.id):
            raise BadRequest(
                "Cancellation failed: no active response found.",
                code="response_cancel_not_active",
            )
        await self._cancel_response("client_cancelled")

    async def _cancel_response(self, reason: str) -> None:
        """Stop the running response and wait until it ended (``response.done``)."""
        run, task = self.response, self._response_task
        if run is None or task is None:
            return
        run.reason = reason
        played = run.played_ms()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ClientGone):
            await task
        if reason == "turn_detected" and run.message is not None and run.audio:
            truncate_audio(run.message, played)
            await self.out.send(
                "conversation.item.truncated",
                item_id=run.message.id,
                content_index=0,
                audio_end_ms=played,
            )

    # ------------------------------------------------------------ tasks

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        async def guarded() -> None:
            try:
                await work
            except ClientGone:
                pass
            except Exception:
                log.exception("realtime session %s: a task failed", self.id)

        task = asyncio.ensure_future(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self) -> None:
        """The client left: stop everything it started (the workers' requests are
        cancelled as their calls close)."""
        self.out.closed = True
        self._early.drop("session closed")
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
