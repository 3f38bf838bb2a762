"""``/v1/realtime``: the OpenAI Realtime API over a WebSocket.

``?model=`` names the session's language model (an lm entry, or one of its
aliases); ``?intent=transcription`` opens a transcription session instead (no
language model: each committed turn is transcribed). The speech models are the
configuration's ``realtime:`` choice, else the first whisper and tts entries; the
session may name another whisper model (``input_audio_transcription.model``).

Either dialect of the API is spoken: the GA one by default, the beta one when the
client sends ``OpenAI-Beta: realtime=v1`` (the SDK's ``client.beta.realtime``).
API keys are checked at the handshake (:mod:`...http.auth`). A session that cannot
start (an unknown model) is told why in an ``error`` event before the socket closes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from starlette.websockets import WebSocket

from mlx_gateway.supervisor.api.realtime.outbox import ClientGone, Outbox
from mlx_gateway.supervisor.api.realtime.session import Models, RealtimeSession
from mlx_gateway.supervisor.api.realtime.settings import Settings, Transcription
from mlx_gateway.supervisor.config.realtime import RealtimeConfig
from mlx_gateway.supervisor.engine.kinds import (
    CHAT_KINDS,
    SPEECH_KINDS,
    TRANSCRIPTION_KINDS,
    kind_of,
    require_kind,
)
from mlx_gateway.supervisor.errors import BadRequest, GatewayError, ModelNotFound
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.caller import caller_of
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.reply.serve import text_model

log = logging.getLogger("mlx_gateway.realtime")

ENDPOINT = "/v1/realtime"
OPENAI_TRANSCRIBERS = ("gpt-4o-mini-transcribe", "gpt-4o-transcribe", "whisper-1")
"""OpenAI's transcription models, which clients name by default (the Agents SDK's
``RealtimeAgent``: gpt-4o-mini-transcribe): a whisper entry's aliases serve them."""
SUBPROTOCOL = "realtime"
"""What a browser offers beside its key (``openai-insecure-api-key.…``)."""


async def realtime(websocket: WebSocket) -> None:
    offered = websocket.scope.get("subprotocols") or []
    await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
    beta = websocket.headers.get("openai-beta", "").replace(" ", "") == "realtime=v1"
    out = Outbox(websocket, beta)
    try:
        session = RealtimeSession(out, *_start(websocket))
    except GatewayError as exc:
        try:
            await out.error(exc)
            await websocket.close(code=1008, reason=exc.message[:120])
        except ClientGone:
            pass
        return
    log.info("realtime session %s opened (%s)", session.id, session.settings.kind)
    await session.run(websocket)
    log.info("realtime session %s closed", session.id)


def _start(websocket: WebSocket) -> tuple[Settings, Models]:
    gateway = gateway_of(websocket)
    registry = gateway.registry
    handles: Sequence[ModelHandle] = registry.visible()
    chosen: RealtimeConfig = gateway.config.realtime
    query = websocket.query_params
    intent = query.get("intent") or "conversation"
    if intent not in ("conversation", "transcription"):
        raise BadRequest(
            f"Invalid value for 'intent': {intent!r} (conversation or transcription).",
            param="intent",
        )
    name = query.get("model")

    def whisper(model: str | None) -> ModelHandle:
        model = model or chosen.transcription_model
        if model:
            try:
                handle = registry.resolve(model)
            except ModelNotFound:
                raise _unserved(model, handles) from None
            require_kind(handle, TRANSCRIPTION_KINDS, f"{ENDPOINT} transcription")
            return handle
        found = [h for h in handles if kind_of(h) in TRANSCRIPTION_KINDS]
        if not found:
            raise BadRequest(
                "No whisper model is configured: the Realtime API transcribes the user's "
                "audio with one.",
                code="model_not_found",
            )
        return found[0]

    speakers = [h for h in handles if kind_of(h) in SPEECH_KINDS]
    # realtime.speech_model outside the key's scope: another speaker it may use, if any
    found = registry.lookup(chosen.speech_model) if chosen.speech_model else None
    tts = found.handle if found is not None else (speakers[0] if speakers else None)
    settings = Settings(voice=chosen.voice, early_transcription=chosen.early_transcription)
    if tts is None:
        settings.modalities = ["text"]
    if intent == "transcription":
        settings.kind = "transcription"
        settings.transcription = Transcription(model=name or whisper(None).name)
        whisper(settings.transcription.model)
        return settings, Models(None, whisper, None, gateway)
    if not name:
        raise BadRequest(
            "Missing required parameter: 'model' (?model=<a language model>).", param="model"
        )
    lm = text_model(registry.resolve(name), CHAT_KINDS, ENDPOINT)
    settings.model = lm.name
    caller = caller_of(websocket.scope)
    return settings, Models(lm, whisper, tts, gateway, caller)


def _unserved(model: str, handles: Sequence[ModelHandle]) -> GatewayError:
    """An unknown transcription model: which whisper models are served, and the alias
    that would serve it."""
    found = [h.name for h in handles if kind_of(h) in TRANSCRIPTION_KINDS]
    served = f"whisper models served: {', '.join(found)}" if found else "no whisper model"
    names = OPENAI_TRANSCRIBERS if model in OPENAI_TRANSCRIBERS else (model,)
    return GatewayError(
        f"The transcription model '{model}' is not served by this gateway ({served}). "
        f"Name one of them, or add '{model}' to a whisper entry's aliases "
        f"(aliases: [{', '.join(names)}]).",
        status=404,
        type="invalid_request_error",
        param="model",
        code="model_not_found",
    )
