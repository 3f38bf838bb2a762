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
from dataclasses import dataclass, field
from typing import Any

from mlx_gateway.supervisor.api.realtime.audio import PCM16, AudioFormat, parse_format
from mlx_gateway.supervisor.api.realtime.vad import EAGERNESS_SILENCE_MS, TurnDetection
from mlx_gateway.supervisor.engine.parsers.tool_calls import Function
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


def _get(data: dict[str, Any], key: str, kind: type | tuple[type, ...], param: str) -> Any:
    """``data[key]`` if it is of ``kind`` (a bool is no number here), ``None`` if absent."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise BadRequest(f"Invalid type for '{param}'.", param=param, code="invalid_type")
    return value


def _dict(data: dict[str, Any], key: str, param: str) -> dict[str, Any]:
    return _get(data, key, dict, param) or {}


def turn_detection(value: Any, param: str) -> TurnDetection | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest(f"Invalid type for '{param}'.", param=param, code="invalid_type")
    kind = value.get("type", "server_vad")
    if kind not in ("server_vad", "semantic_vad"):
        raise BadRequest(
            f"Invalid value for '{param}.type': {kind!r}. This server offers 'server_vad' "
            "and 'semantic_vad' (or null: no turn detection).",
            param=f"{param}.type",
            code="invalid_value",
        )
    flags = {
        k: _get(value, k, bool, f"{param}.{k}") for k in ("create_response", "interrupt_response")
    }
    if kind == "semantic_vad":
        return _semantic(value, param, flags)
    base = TurnDetection()
    threshold = _get(value, "threshold", (int, float), f"{param}.threshold")
    if threshold is not None and not 0 <= threshold <= 1:
        raise BadRequest(
            f"'{param}.threshold' must be between 0 and 1.", param=f"{param}.threshold"
        )
    ms = {}
    for key in ("prefix_padding_ms", "silence_duration_ms"):
        number = _get(value, key, int, f"{param}.{key}")
        if number is not None and not 0 <= number <= 10_000:
            raise BadRequest(f"'{param}.{key}' must be 0 to 10000.", param=f"{param}.{key}")
        ms[key] = number
    return TurnDetection(
        threshold=base.threshold if threshold is None else float(threshold),
        prefix_padding_ms=_or(ms["prefix_padding_ms"], base.prefix_padding_ms),
        silence_duration_ms=_or(ms["silence_duration_ms"], base.silence_duration_ms),
        create_response=_or(flags["create_response"], True),
        interrupt_response=_or(flags["interrupt_response"], True),
    )


def _semantic(value: dict[str, Any], param: str, flags: dict[str, Any]) -> TurnDetection:
    """``semantic_vad``: the server VAD, its silence chosen by ``eagerness``."""
    eagerness = _get(value, "eagerness", str, f"{param}.eagerness") or "auto"
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
        create_response=_or(flags["create_response"], True),
        interrupt_response=_or(flags["interrupt_response"], True),
        type="semantic_vad",
        eagerness=eagerness,
    )


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def transcription(value: Any, param: str) -> Transcription | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest(f"Invalid type for '{param}'.", param=param, code="invalid_type")
    return Transcription(
        model=_get(value, "model", str, f"{param}.model"),
        language=_get(value, "language", str, f"{param}.language") or None,
        prompt=_get(value, "prompt", str, f"{param}.prompt") or None,
    )


def voice(value: Any, param: str) -> str | None:
    if isinstance(value, dict):
        value = value.get("id")
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"Invalid type for '{param}'.", param=param, code="invalid_type")
    return value


def tools(value: Any, param: str = "tools") -> list[Function]:
    if not isinstance(value, list):
        raise BadRequest(f"Invalid type for '{param}': a list.", param=param, code="invalid_type")
    out = []
    for i, tool in enumerate(value):
        where = f"{param}[{i}]"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise BadRequest(
                f"Invalid value for '{where}': only function tools are supported.",
                param=where,
                code="invalid_value",
            )
        name = _get(tool, "name", str, f"{where}.name")
        if not name:
            raise BadRequest(f"Missing required parameter: '{where}.name'.", param=where)
        out.append(
            Function(
                name=name,
                parameters=_get(tool, "parameters", dict, f"{where}.parameters") or {},
                description=_get(tool, "description", str, f"{where}.description"),
            )
        )
    return out


def tool_choice(value: Any, functions: list[Function], param: str = "tool_choice") -> str:
    name = value.get("name") if isinstance(value, dict) else value
    if isinstance(name, str) and (
        name in ("auto", "none", "required") or name in {f.name for f in functions}
    ):
        if name == "required" and not functions:
            raise BadRequest(f"'{param}' 'required' needs at least one tool.", param=param)
        return name
    raise BadRequest(
        f"Invalid value for '{param}': {value!r} (auto, none, required, or "
        '{"type": "function", "name": …} of one of the tools).',
        param=param,
        code="invalid_value",
    )


def max_tokens(value: Any, param: str) -> int | None:
    if value == "inf" or value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 4096:
        return value
    raise BadRequest(
        f"Invalid value for '{param}': an integer from 1 to 4096, or 'inf'.",
        param=param,
        code="invalid_value",
    )


def modalities(value: Any, param: str) -> list[str]:
    if isinstance(value, list) and set(value) in MODALITIES and len(set(value)) == len(value):
        return list(value)
    raise BadRequest(
        f"Invalid value for '{param}': ['text'], ['audio'] or ['text', 'audio'].",
        param=param,
        code="invalid_value",
    )


def updated(current: Settings, data: Any, beta: bool) -> Settings:
    """``current`` with a ``session.update``'s ``session`` applied (a copy: nothing
    changes when a field is wrong)."""
    if not isinstance(data, dict):
        raise BadRequest("Invalid type for 'session'.", param="session", code="invalid_type")
    new = dataclasses.replace(current)
    if beta:
        _flat(new, data, "session")
    else:
        _nested(new, data, "session")
    if "instructions" in data:
        new.instructions = _get(data, "instructions", str, "session.instructions") or ""
    if "tools" in data:
        new.tools = tools(data["tools"], "session.tools")
    if "tool_choice" in data:
        new.tool_choice = tool_choice(data["tool_choice"], new.tools, "session.tool_choice")
    elif new.tool_choice not in ("auto", "none", "required") and new.tool_choice not in {
        f.name for f in new.tools
    }:
        new.tool_choice = "auto"
    if "temperature" in data:
        temperature = _get(data, "temperature", (int, float), "session.temperature")
        if temperature is not None and not 0 <= temperature <= 2:
            raise BadRequest("'session.temperature' must be 0 to 2.", param="session.temperature")
        new.temperature = temperature
    return new


def _flat(new: Settings, data: dict[str, Any], p: str) -> None:
    if "modalities" in data:
        new.modalities = modalities(data["modalities"], f"{p}.modalities")
    if "voice" in data:
        new.voice = voice(data["voice"], f"{p}.voice")
    if data.get("input_audio_format") is not None:
        new.input_format = parse_format(data["input_audio_format"], f"{p}.input_audio_format")
    if data.get("output_audio_format") is not None:
        new.output_format = parse_format(data["output_audio_format"], f"{p}.output_audio_format")
    if "input_audio_transcription" in data:
        param = f"{p}.input_audio_transcription"
        new.transcription = transcription(data["input_audio_transcription"], param)
    if "turn_detection" in data:
        new.turn_detection = turn_detection(data["turn_detection"], f"{p}.turn_detection")
    if "max_response_output_tokens" in data:
        param = f"{p}.max_response_output_tokens"
        new.max_output_tokens = max_tokens(data["max_response_output_tokens"], param)
    if "speed" in data:
        new.speed = _speed(data["speed"], f"{p}.speed")


def _nested(new: Settings, data: dict[str, Any], p: str) -> None:
    kind = data.get("type")
    if kind is not None and kind != new.kind:
        raise BadRequest(
            f"Invalid value for '{p}.type': {kind!r}; this is a {new.kind} session "
            "(a transcription session is opened with ?intent=transcription).",
            param=f"{p}.type",
            code="invalid_value",
        )
    if "output_modalities" in data:
        new.modalities = modalities(data["output_modalities"], f"{p}.output_modalities")
    if "max_output_tokens" in data:
        new.max_output_tokens = max_tokens(data["max_output_tokens"], f"{p}.max_output_tokens")
    audio = _dict(data, "audio", f"{p}.audio")
    given = _dict(audio, "input", f"{p}.audio.input")
    if given.get("format") is not None:
        new.input_format = parse_format(given["format"], f"{p}.audio.input.format")
    if "transcription" in given:
        param = f"{p}.audio.input.transcription"
        new.transcription = transcription(given["transcription"], param)
    if "turn_detection" in given:
        param = f"{p}.audio.input.turn_detection"
        new.turn_detection = turn_detection(given["turn_detection"], param)
    out = _dict(audio, "output", f"{p}.audio.output")
    if out.get("format") is not None:
        new.output_format = parse_format(out["format"], f"{p}.audio.output.format")
    if "voice" in out:
        new.voice = voice(out["voice"], f"{p}.audio.output.voice")
    if "speed" in out:
        new.speed = _speed(out["speed"], f"{p}.audio.output.speed")


def _speed(value: Any, param: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.25 <= value <= 4:
        return float(value)
    raise BadRequest(f"'{param}' must be 0.25 to 4.", param=param, code="invalid_value")


# ---------------------------------------------------------------- rendering


def _tools(settings: Settings) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "name": f.name,
            "description": f.description or "",
            "parameters": f.parameters,
        }
        for f in settings.tools
    ]


def _vad(settings: Settings) -> dict[str, Any] | None:
    """The turn detection as the client set it (``semantic_vad`` with its eagerness)."""
    vad = settings.turn_detection
    if vad is None:
        return None
    flags = {"create_response": vad.create_response, "interrupt_response": vad.interrupt_response}
    if vad.type == "semantic_vad":
        return {"type": "semantic_vad", "eagerness": vad.eagerness, **flags}
    return {
        "type": "server_vad",
        "threshold": vad.threshold,
        "prefix_padding_ms": vad.prefix_padding_ms,
        "silence_duration_ms": vad.silence_duration_ms,
        **flags,
    }


def _transcription(settings: Settings) -> dict[str, Any] | None:
    t = settings.transcription
    return None if t is None else dataclasses.asdict(t)


def rendered(settings: Settings, session_id: str, beta: bool) -> dict[str, Any]:
    """The ``session`` object of ``session.created`` / ``session.updated``."""
    choice: Any = settings.tool_choice
    if choice not in ("auto", "none", "required"):
        choice = {"type": "function", "name": choice}
    if beta:
        out: dict[str, Any] = {
            "id": session_id,
            "object": "realtime.session"
            if settings.kind == "realtime"
            else "realtime.transcription_session",
            "input_audio_format": settings.input_format.name,
            "input_audio_transcription": _transcription(settings),
            "turn_detection": _vad(settings),
        }
        if settings.kind == "realtime":
            out |= {
                "model": settings.model,
                "modalities": settings.modalities,
                "instructions": settings.instructions,
                "voice": settings.voice,
                "output_audio_format": settings.output_format.name,
                "tools": _tools(settings),
                "tool_choice": choice,
                "temperature": settings.temperature,
                "max_response_output_tokens": settings.max_output_tokens or "inf",
                "speed": settings.speed,
            }
        return out
    audio_in = {
        "format": settings.input_format.ga(),
        "transcription": _transcription(settings),
        "turn_detection": _vad(settings),
        "noise_reduction": None,
    }
    if settings.kind == "transcription":
        return {
            "type": "transcription",
            "object": "realtime.transcription_session",
            "id": session_id,
            "audio": {"input": audio_in},
        }
    return {
        "type": "realtime",
        "object": "realtime.session",
        "id": session_id,
        "model": settings.model,
        "output_modalities": settings.modalities,
        "instructions": settings.instructions,
        "audio": {
            "input": audio_in,
            "output": {
                "format": settings.output_format.ga(),
                "voice": settings.voice,
                "speed": settings.speed,
            },
        },
        "tools": _tools(settings),
        "tool_choice": choice,
        "max_output_tokens": settings.max_output_tokens or "inf",
    }
