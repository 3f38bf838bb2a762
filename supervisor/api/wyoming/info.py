"""``describe`` → ``info``: what the Wyoming server offers, from the model handles.

Each whisper model is an ASR model; each tts model is a TTS voice named after the
model, whose speakers are the model's voices (known once its worker has loaded it,
else the ``voices:`` names of its entry).
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from wyoming.info import (
    AsrModel,
    AsrProgram,
    Attribution,
    Info,
    TtsProgram,
    TtsVoice,
    TtsVoiceSpeaker,
)

from mlx_gateway.supervisor.config.apps import KeyConfig
from mlx_gateway.supervisor.config.kinds import settings_as
from mlx_gateway.supervisor.config.kinds.tts import OPENAI_VOICES, TtsConfig
from mlx_gateway.supervisor.config.schema import WyomingConfig
from mlx_gateway.supervisor.engine.kinds import SPEECH_KINDS, TRANSCRIPTION_KINDS, kind_of
from mlx_gateway.supervisor.http.caller import ANONYMOUS, Caller
from mlx_gateway.supervisor.http.keyring import caller_for
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

PROGRAM = "mlx-gateway"
_ATTRIBUTION = Attribution(name="mlx-gateway", url="")


def _version() -> str | None:
    try:
        return version("mlx-gateway")
    except PackageNotFoundError:
        return None


def wyoming_caller(apps: list[KeyConfig], config: WyomingConfig) -> Caller:
    """The app Wyoming acts as: the ``server.keys`` entry ``config.key`` names (its
    models, priority and name in logs), else :data:`ANONYMOUS` (every model)."""
    for app in apps:
        if app.name == config.key:
            return caller_for(app)
    return ANONYMOUS


def offered(handles: list[ModelHandle], config: WyomingConfig) -> list[ModelHandle]:
    """The whisper and tts models the server offers (``models:``, else all)."""
    kinds = (*TRANSCRIPTION_KINDS, *SPEECH_KINDS)
    speech = [h for h in handles if kind_of(h) in kinds]
    if not config.models:
        return speech
    wanted = set(config.models)
    return [h for h in speech if wanted & set(h.config.names)]


def speakers(handle: ModelHandle) -> list[str]:
    """The voices of a tts model, as far as the gateway knows them."""
    facts = handle.facts
    aliases = settings_as(handle.config, TtsConfig).voices
    if facts is not None and "voices" in facts.extra:  # reported by its worker
        listed = [v for v in facts.extra["voices"].split(",") if v]
        return [v for v in listed if v not in OPENAI_VOICES or v in aliases]
    return ["default", *aliases]


def describe(handles: list[ModelHandle], config: WyomingConfig) -> Info:
    models = offered(handles, config)
    asr = [
        AsrModel(
            name=h.name,
            attribution=Attribution(name=h.config.model_path, url=""),
            installed=True,
            description=f"{h.name} (Whisper, {h.config.model_path})",
            version=None,
            languages=list(config.languages),
        )
        for h in models
        if kind_of(h) in TRANSCRIPTION_KINDS
    ]
    voices = [
        TtsVoice(
            name=h.name,
            attribution=Attribution(name=h.config.model_path, url=""),
            installed=True,
            description=f"{h.name} ({h.config.model_path})",
            version=None,
            languages=list(config.languages),
            speakers=[TtsVoiceSpeaker(name=s) for s in speakers(h)],
        )
        for h in models
        if kind_of(h) in SPEECH_KINDS
    ]
    info = Info()
    if asr:
        info.asr = [
            AsrProgram(
                name=PROGRAM,
                attribution=_ATTRIBUTION,
                installed=True,
                description="Speech to text by the gateway's Whisper models",
                version=_version(),
                models=asr,
            )
        ]
    if voices:
        info.tts = [
            TtsProgram(
                name=PROGRAM,
                attribution=_ATTRIBUTION,
                installed=True,
                description="Text to speech by the gateway's mlx-audio models",
                version=_version(),
                voices=voices,
                supports_synthesize_streaming=True,
            )
        ]
    return info
