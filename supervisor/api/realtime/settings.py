"""A Realtime session's settings, read from and written in either dialect.

The GA interface (``client.realtime``) nests audio settings
(``audio.input.format``, ``audio.output.voice`` …) and names the session's kind in
``type``; the beta one (``client.beta.realtime``, header ``OpenAI-Beta:
realtime=v1``) keeps them flat (``input_audio_format``, ``voice`` …). Both update
the same :class:`Settings`; a field left out keeps its value, a wrong one is an
error naming it and changes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from msgspec import UNSET, Struct, UnsetType

from mlx_gateway.supervisor.api.realtime.audio import PCM16, AudioFormat, GaFormat, parse_format
from mlx_gateway.supervisor.api.realtime.events import (
    AudioFields,
    AudioInput,
    AudioOutput,
    BetaSession,
    GaSession,
    JsonObject,
    MaxTokensField,
    ToolChoiceField,
    ToolChoiceFields,
    ToolFields,
    TranscriptionFields,
    VadFields,
    VoiceField,
    VoiceId,
    converted,
)
from mlx_gateway.supervisor.api.realtime.vad import EAGERNESS_SILENCE_MS, TurnDetection
from mlx_gateway.supervisor.engine.tools import Function
from mlx_gateway.supervisor.errors import BadRequest

MODALITIES = ({"text"}, {"audio"}, {"text", "audio"})


@dataclass
class Transcription:
    model: str | None = None
    language: str | None = None
    prompt: str | None = None


@dataclass
class Settings:
    kind: str = "realtime"
    """``realtime`` (a conversation) or ``transcription``."""
    model: str = ""
    instructions: str = ""
    modalities: list[str] = field(default_factory=lambda: ["audio"])
    voice: str | None = None
    speed: float = 1.0
    input_format: AudioFormat = PCM16
    output_format: AudioFormat = PCM16
    transcription: Transcription | None = None
    """The user audio's transcripts sent to the client (``input_audio_transcription``);
    a conversation transcribes the user's audio for the model either way."""
    turn_detection: TurnDetection | None = field(default_factory=TurnDetection)
    tools: list[Function] = field(default_factory=list)
    tool_choice: str = "auto"
    temperature: float | None = None
    max_output_tokens: int | None = None
    """``None``: ``inf``, the model's own limit."""
    early_transcription: bool = True
    """The gateway's ``realtime.early_transcription`` (no field of the API): with
    server_vad or semantic_vad, a turn's transcription starts at the first silence
    after its speech."""


def turn_detection(value: VadFields | None, param: str) -> TurnDetection | None:
    if value is None:
        return None
    if value.type not in ("server_vad", "semantic_vad"):
        raise BadRequest(
            f"Invalid value for '{param}.type': {value.type!r}. This server offers "
            "'server_vad' and 'semantic_vad' (or null: no turn detection).",
            param=f"{param}.type",
            code="invalid_value",
        )
    create = _or(value.create_response, True)
    interrupt = _or(value.interrupt_response, True)
    if value.type == "semantic_vad":
        return _semantic(value.eagerness or "auto", param, create, interrupt)
    base = TurnDetection()
    if value.threshold is not None and not 0 <= value.threshold <= 1:
        raise BadRequest(
            f"'{param}.threshold' must be between 0 and 1.", param=f"{param}.threshold"
        )
    for key, ms in (
        ("prefix_padding_ms", value.prefix_padding_ms),
        ("silence_duration_ms", value.silence_duration_ms),
    ):
        if ms is not None and not 0 <= ms <= 10_000:
            raise BadRequest(f"'{param}.{key}' must be 0 to 10000.", param=f"{param}.{key}")
    return TurnDetection(
        threshold=_or(value.threshold, base.threshold),
        prefix_padding_ms=_or(value.prefix_padding_ms, base.prefix_padding_ms),
        silence_duration_ms=_or(value.silence_duration_ms, base.silence_duration_ms),
        create_response=create,
        interrupt_response=interrupt,
    )


def _semantic(eagerness: str, param: str, create: bool, interrupt: bool) -> TurnDetection:
    """``semantic_vad``: the server VAD, its silence chosen by ``eagerness``."""
    if eagerness not in EAGERNESS_SILENCE_MS:
        allowed = ", ".join(repr(e) for e in EAGERNESS_SILENCE_MS)
        raise BadRequest(
            f"Invalid value for '{param}.eagerness': {eagerness!r}. Supported values are: "
            f"{allowed}.",
            param=f"{param}.eagerness",
            code="invalid_value",
        )
    return TurnDetection(
        silence_duration_ms=EAGERNESS_SILENCE_MS[eagerness],
        create_response=create,
        interrupt_response=interrupt,
        type="semantic_vad",
        eagerness=eagerness,
    )


T = TypeVar("T")


def _or(value: T | None, default: T) -> T:
    return default if value is None else value


def transcription(value: TranscriptionFields | None) -> Transcription | None:
    if value is None:
        return None
    return Transcription(
        model=value.model, language=value.language or None, prompt=value.prompt or None
    )


def voice(value: VoiceField) -> str | None:
    return value.id if isinstance(value, VoiceId) else value


def tools(value: list[ToolFields], param: str = "tools") -> list[Function]:
    out = []
    for i, tool in enumerate(value):
        where = f"{param}[{i}]"
        if tool.type != "function":
            raise BadRequest(
                f"Invalid value for '{where}': only function tools are supported.",
                param=where,
                code="invalid_value",
            )
        if not tool.name:
            raise BadRequest(f"Missing required parameter: '{where}.name'.", param=where)
        out.append(
            Function(name=tool.name, parameters=tool.parameters or {}, description=tool.description)
        )
    return out


def tool_choice(
    value: ToolChoiceField, functions: list[Function], param: str = "tool_choice"
) -> str:
    name = value.name if isinstance(value, ToolChoiceFields) else value
    if isinstance(name, str) and (
        name in ("auto", "none", "required") or name in {f.name for f in functions}
    ):
        if name == "required" and not functions:
            raise BadRequest(f"'{param}' 'required' needs at least one tool.", param=param)
        return name
    raise BadRequest(
        f"Invalid value for '{param}': {msgspec.to_builtins(value)!r} (auto, none, required, "
        'or {"type": "function", "name": …} of one of the tools).',
        param=param,
        code="invalid_value",
    )


def max_tokens(value: MaxTokensField, param: str) -> int | None:
    if value == "inf" or value is None:
        return None
    if isinstance(value, int) and 1 <= value <= 4096:
        return value
    raise BadRequest(
        f"Invalid value for '{param}': an integer from 1 to 4096, or 'inf'.",
        param=param,
        code="invalid_value",
    )


def modalities(value: list[str], param: str) -> list[str]:
    if set(value) in MODALITIES and len(set(value)) == len(value):
        return list(value)
    raise BadRequest(
        f"Invalid value for '{param}': ['text'], ['audio'] or ['text', 'audio'].",
        param=param,
        code="invalid_value",
    )


def updated(
    current: Settings, data: GaSession | BetaSession | Mapping[str, object] | None, beta: bool
) -> Settings:
    """``current`` with a ``session.update``'s ``session`` applied (a copy: nothing
    changes when a field is wrong); ``data`` may be the session object as Python
    values, read as the dialect writes it."""
    if isinstance(data, Mapping):
        if beta:
            data = converted(data, BetaSession, "session")
        else:
            data = converted(data, GaSession, "session")
    if data is None:
        raise BadRequest("Invalid type for 'session'.", param="session", code="invalid_type")
    new = dataclasses.replace(current)
    match data:
        case BetaSession() if beta:
            _flat(new, data, "session")
        case GaSession() if not beta:
            _nested(new, data, "session")
        case _:  # pragma: no cover - the session decodes as its connection's dialect
            raise AssertionError(f"a {type(data).__name__} on a {'beta' if beta else 'GA'} session")
    if data.instructions is not UNSET:
        new.instructions = data.instructions or ""
    if data.tools is not UNSET:
        new.tools = tools(data.tools, "session.tools")
    if data.tool_choice is not UNSET:
        new.tool_choice = tool_choice(data.tool_choice, new.tools, "session.tool_choice")
    elif new.tool_choice not in ("auto", "none", "required") and new.tool_choice not in {
        f.name for f in new.tools
    }:
        new.tool_choice = "auto"
    if data.temperature is not UNSET:
        temperature = data.temperature
        if temperature is not None and not 0 <= temperature <= 2:
            raise BadRequest("'session.temperature' must be 0 to 2.", param="session.temperature")
        new.temperature = temperature
    return new


def _flat(new: Settings, data: BetaSession, p: str) -> None:
    if data.modalities is not UNSET:
        new.modalities = modalities(data.modalities, f"{p}.modalities")
    if data.voice is not UNSET:
        new.voice = voice(data.voice)
    if data.input_audio_format is not None:
        new.input_format = parse_format(data.input_audio_format, f"{p}.input_audio_format")
    if data.output_audio_format is not None:
        new.output_format = parse_format(data.output_audio_format, f"{p}.output_audio_format")
    if data.input_audio_transcription is not UNSET:
        new.transcription = transcription(data.input_audio_transcription)
    if data.turn_detection is not UNSET:
        new.turn_detection = turn_detection(data.turn_detection, f"{p}.turn_detection")
    if data.max_response_output_tokens is not UNSET:
        param = f"{p}.max_response_output_tokens"
        new.max_output_tokens = max_tokens(data.max_response_output_tokens, param)
    if data.speed is not UNSET:
        new.speed = _speed(data.speed, f"{p}.speed")


def _nested(new: Settings, data: GaSession, p: str) -> None:
    if data.type is not None and data.type != new.kind:
        raise BadRequest(
            f"Invalid value for '{p}.type': {data.type!r}; this is a {new.kind} session "
            "(a transcription session is opened with ?intent=transcription).",
            param=f"{p}.type",
            code="invalid_value",
        )
    if data.output_modalities is not UNSET:
        new.modalities = modalities(data.output_modalities, f"{p}.output_modalities")
    if data.max_output_tokens is not UNSET:
        new.max_output_tokens = max_tokens(data.max_output_tokens, f"{p}.max_output_tokens")
    audio = data.audio or AudioFields()
    given = audio.input or AudioInput()
    if given.format is not None:
        new.input_format = parse_format(given.format, f"{p}.audio.input.format")
    if given.transcription is not UNSET:
        new.transcription = transcription(given.transcription)
    if given.turn_detection is not UNSET:
        param = f"{p}.audio.input.turn_detection"
        new.turn_detection = turn_detection(given.turn_detection, param)
    out = audio.output or AudioOutput()
    if out.format is not None:
        new.output_format = parse_format(out.format, f"{p}.audio.output.format")
    if out.voice is not UNSET:
        new.voice = voice(out.voice)
    if out.speed is not UNSET:
        new.speed = _speed(out.speed, f"{p}.audio.output.speed")


def _speed(value: float, param: str) -> float:
    if 0.25 <= value <= 4:
        return float(value)
    raise BadRequest(f"'{param}' must be 0.25 to 4.", param=param, code="invalid_value")


# ---------------------------------------------------------------- rendering
# The session object of ``session.created`` / ``session.updated``, field for field in
# the order the API writes them; ``UNSET`` fields are left out (a transcription
# session's have no model, voice, tools …).


class ToolObject(Struct, kw_only=True):
    type: str = "function"
    name: str
    description: str
    parameters: JsonObject


class VadObject(Struct):
    type: str
    eagerness: str | UnsetType | None = UNSET
    threshold: float | UnsetType = UNSET
    prefix_padding_ms: int | UnsetType = UNSET
    silence_duration_ms: int | UnsetType = UNSET
    create_response: bool = True
    interrupt_response: bool = True


class FunctionChoice(Struct, kw_only=True):
    type: str = "function"
    name: str


class BetaSessionObject(Struct, kw_only=True):
    id: str
    object: str
    input_audio_format: str
    input_audio_transcription: Transcription | None
    turn_detection: VadObject | None
    model: str | UnsetType = UNSET
    modalities: list[str] | UnsetType = UNSET
    instructions: str | UnsetType = UNSET
    voice: str | UnsetType | None = UNSET
    output_audio_format: str | UnsetType = UNSET
    tools: list[ToolObject] | UnsetType = UNSET
    tool_choice: str | FunctionChoice | UnsetType = UNSET
    temperature: float | UnsetType | None = UNSET
    max_response_output_tokens: int | str | UnsetType = UNSET
    speed: float | UnsetType = UNSET


class GaAudioInput(Struct):
    format: GaFormat
    transcription: Transcription | None
    turn_detection: VadObject | None
    noise_reduction: None = None


class GaAudioOutput(Struct):
    format: GaFormat
    voice: str | None
    speed: float


class GaAudio(Struct):
    input: GaAudioInput
    output: GaAudioOutput | UnsetType = UNSET


class GaSessionObject(Struct, kw_only=True):
    type: str
    object: str
    id: str
    model: str | UnsetType = UNSET
    output_modalities: list[str] | UnsetType = UNSET
    instructions: str | UnsetType = UNSET
    audio: GaAudio
    tools: list[ToolObject] | UnsetType = UNSET
    tool_choice: str | FunctionChoice | UnsetType = UNSET
    max_output_tokens: int | str | UnsetType = UNSET


def _tools(settings: Settings) -> list[ToolObject]:
    return [
        ToolObject(name=f.name, description=f.description or "", parameters=f.parameters)
        for f in settings.tools
    ]


def _vad(settings: Settings) -> VadObject | None:
    """The turn detection as the client set it (``semantic_vad`` with its eagerness)."""
    vad = settings.turn_detection
    if vad is None:
        return None
    if vad.type == "semantic_vad":
        out = VadObject("semantic_vad", eagerness=vad.eagerness)
    else:
        out = VadObject(
            "server_vad",
            threshold=vad.threshold,
            prefix_padding_ms=vad.prefix_padding_ms,
            silence_duration_ms=vad.silence_duration_ms,
        )
    out.create_response, out.interrupt_response = vad.create_response, vad.interrupt_response
    return out


def rendered(settings: Settings, session_id: str, beta: bool) -> dict[str, Any]:
    """The ``session`` object of ``session.created`` / ``session.updated`` (as JSON
    values)."""
    realtime = settings.kind == "realtime"
    choice: str | FunctionChoice = settings.tool_choice
    if choice not in ("auto", "none", "required"):
        choice = FunctionChoice(name=settings.tool_choice)
    session: BetaSessionObject | GaSessionObject
    if beta:
        session = BetaSessionObject(
            id=session_id,
            object="realtime.session" if realtime else "realtime.transcription_session",
            input_audio_format=settings.input_format.name,
            input_audio_transcription=settings.transcription,
            turn_detection=_vad(settings),
        )
        if realtime:
            session.model = settings.model
            session.modalities = settings.modalities
            session.instructions = settings.instructions
            session.voice = settings.voice
            session.output_audio_format = settings.output_format.name
            session.tools = _tools(settings)
            session.tool_choice = choice
            session.temperature = settings.temperature
            session.max_response_output_tokens = settings.max_output_tokens or "inf"
            session.speed = settings.speed
        return msgspec.to_builtins(session)
    audio = GaAudio(
        GaAudioInput(settings.input_format.ga(), settings.transcription, _vad(settings))
    )
    if not realtime:
        session = GaSessionObject(
            type="transcription",
            object="realtime.transcription_session",
            id=session_id,
            audio=audio,
        )
        return msgspec.to_builtins(session)
    audio.output = GaAudioOutput(settings.output_format.ga(), settings.voice, settings.speed)
    session = GaSessionObject(
        type="realtime",
        object="realtime.session",
        id=session_id,
        model=settings.model,
        output_modalities=settings.modalities,
        instructions=settings.instructions,
        audio=audio,
        tools=_tools(settings),
        tool_choice=choice,
        max_output_tokens=settings.max_output_tokens or "inf",
    )
    return msgspec.to_builtins(session)
