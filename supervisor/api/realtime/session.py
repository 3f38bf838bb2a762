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
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.websockets import WebSocket

from mlx_gateway.supervisor.api.realtime import settings as fields
from mlx_gateway.supervisor.api.realtime.audio import AudioFormat
from mlx_gateway.supervisor.api.realtime.conversation import (
    Conversation,
    Item,
    decode_base64,
    new_id,
    parse_item,
)
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
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

log = logging.getLogger("mlx_gateway.realtime")


@dataclass
class Models:
    """The workers a session uses (resolved by the route)."""

    lm: ModelHandle | None
    whisper: Callable[[str | None], ModelHandle]
    """The whisper model a transcription names (``None``: the default one)."""
    tts: ModelHandle | None


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
                await self._message(dict(message))
        except ClientGone:
            return
        finally:
            await self.close()

    async def _message(self, message: dict[str, Any]) -> None:
        event_id = None
        try:
            text = message.get("text")
            if text is None:
                raise BadRequest(
                    "Binary frames are not events: send JSON text frames.",
                    code="invalid_event",
                )
            try:
                event = json.loads(text)
            except ValueError:
                raise BadRequest("The event is not valid JSON.", code="invalid_json") from None
            if not isinstance(event, dict):
                raise BadRequest("An event is a JSON object.", code="invalid_event")
            event_id = event.get("event_id")
            await self._event(event)
        except GatewayError as exc:
            await self.out.error(exc, event_id if isinstance(event_id, str) else None)

    async def _event(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        handler = self._handlers().get(kind) if isinstance(kind, str) else None
        if handler is None:
            raise BadRequest(
                f"Invalid value: {kind!r}. Supported values are: "
                f"{', '.join(sorted(self._handlers()))}.",
                param="type",
                code="invalid_value",
            )
        await handler(event)

    def _handlers(self) -> dict[str, Callable[[dict[str, Any]], Awaitable[None]]]:
        return {
            "session.update": self._session_update,
            "transcription_session.update": self._session_update,
            "input_audio_buffer.append": self._append,
            "input_audio_buffer.commit": self._commit,
            "input_audio_buffer.clear": self._clear,
            "conversation.item.create": self._item_create,
            "conversation.item.delete": self._item_delete,
            "conversation.item.truncate": self._item_truncate,
            "conversation.item.retrieve": self._item_retrieve,
            "response.create": self._response_create,
            "response.cancel": self._response_cancel,
            "output_audio_buffer.clear": self._webrtc_only,
        }

    # ------------------------------------------------------------ session

    async def _session_update(self, event: dict[str, Any]) -> None:
        transcription_event = event["type"] == "transcription_session.update"
        new = fields.updated(self.settings, event.get("session"), self.beta)
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

    async def _webrtc_only(self, event: dict[str, Any]) -> None:
        raise BadRequest(
            f"{event['type']} is for WebRTC and SIP connections; over a WebSocket the "
            "client plays the audio and truncates the item itself.",
            param="type",
            code="unsupported_event",
        )

    # ------------------------------------------------------------ input audio

    async def _append(self, event: dict[str, Any]) -> None:
        data = decode_base64(event.get("audio"), "audio")
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
                    await self._start_response(self._plan({}))

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

    async def _commit(self, event: dict[str, Any]) -> None:
        self._turn = TurnClock(time.monotonic())
        await self._commit_buffer(self._speech_item or new_id("item"), None)
        self._speech_item = None
        if self.buffer.vad is not None:
            self.buffer.vad.reset()

    async def _commit_buffer(self, item_id: str, end_ms: int | None) -> None:
        audio = self.buffer.take(end_ms)
        early = self._early.run and self._early.take(item_id, audio, *self._hearing())
        item = Item(item_id, "message", role="user")
        item.content = [{"type": "input_audio", "transcript": None}]
        item.audio = audio
        pending(item)
        previous = self.conversation.add(item)
        await self.out.send(
            "input_audio_buffer.committed", previous_item_id=previous, item_id=item.id
        )
        await self._item_added(item, previous, early)

    async def _clear(self, event: dict[str, Any]) -> None:
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

    async def _item_create(self, event: dict[str, Any]) -> None:
        self._conversation_only(event)
        item = parse_item(event.get("item"))
        if item.audio:
            self.models.whisper(None)  # a 404 now, before the item is added
            pending(item)
        previous = self.conversation.add(item, event.get("previous_item_id"))
        await self._item_added(item, previous)

    async def _item_delete(self, event: dict[str, Any]) -> None:
        item_id = event.get("item_id")
        self.conversation.delete(item_id)
        await self.out.send("conversation.item.deleted", item_id=item_id)

    async def _item_retrieve(self, event: dict[str, Any]) -> None:
        item = self.conversation.get(event.get("item_id"))
        await self.out.send("conversation.item.retrieved", item=item.rendered(self.beta))

    async def _item_truncate(self, event: dict[str, Any]) -> None:
        item = self.conversation.get(event.get("item_id"))
        end = event.get("audio_end_ms")
        if not isinstance(end, int) or isinstance(end, bool) or end < 0:
            raise BadRequest("'audio_end_ms' must be a non-negative integer.", param="audio_end_ms")
        if event.get("content_index", 0) != 0:
            raise BadRequest("Only content_index 0 can be truncated.", param="content_index")
        truncate_audio(item, end)
        await self.out.send(
            "conversation.item.truncated", item_id=item.id, content_index=0, audio_end_ms=end
        )

    def _conversation_only(self, event: dict[str, Any]) -> None:
        if self.settings.kind != "realtime":
            raise BadRequest(
                f"{event['type']} is not available in a transcription session.",
                param="type",
                code="invalid_event",
            )

    # ------------------------------------------------------------ responses

    def _plan(self, request: Any) -> Plan:
        if not isinstance(request, dict):
            raise BadRequest("Invalid type for 'response'.", param="response")
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
        if isinstance(request.get("instructions"), str):
            plan.instructions = request["instructions"]
        for key in ("modalities", "output_modalities"):
            if key in request:
                plan.modalities = fields.modalities(request[key], f"{p}.{key}")
        if "voice" in request:
            plan.voice = fields.voice(request["voice"], f"{p}.voice")
        if "tools" in request:
            plan.tools = fields.tools(request["tools"], f"{p}.tools")
        if "tool_choice" in request:
            plan.tool_choice = fields.tool_choice(
                request["tool_choice"], plan.tools, f"{p}.tool_choice"
            )
        for key in ("max_output_tokens", "max_response_output_tokens"):
            if key in request:
                plan.max_output_tokens = fields.max_tokens(request[key], f"{p}.{key}")
        if "temperature" in request:
            plan.temperature = request["temperature"]
        if request.get("conversation") == "none":
            plan.into_conversation = False
        if "input" in request:
            items = request["input"]
            if not isinstance(items, list):
                raise BadRequest("Invalid type for 'response.input'.", param="response.input")
            plan.input = [
                self.conversation.get(i.get("id"), "response.input")
                if isinstance(i, dict) and i.get("type") == "item_reference"
                else parse_item(i)
                for i in items
            ]
        if isinstance(request.get("metadata"), dict):
            plan.metadata = request["metadata"]
        return plan

    async def _response_create(self, event: dict[str, Any]) -> None:
        self._conversation_only(event)
        plan = self._plan(event.get("response") or {})
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
        if self.models.lm is None:
            raise BadRequest("This session has no language model.", param="model")
        run = ResponseRun(self.out, self.conversation, self.models.lm, self.models.tts, plan)
        run.clock, self._turn = self._turn, TurnClock()  # the first answer of a turn
        self.response = run

        async def go() -> None:
            try:
                await run.run()
            finally:
                if self.response is run:
                    self.response = None

        self._response_task = self._spawn(go())

    async def _response_cancel(self, event: dict[str, Any]) -> None:
        wanted = event.get("response_id")
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
