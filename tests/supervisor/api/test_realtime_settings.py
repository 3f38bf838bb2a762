"""``turn_detection`` in ``session.update``: ``semantic_vad`` is accepted (the
Agents SDK's default), served by the server VAD with the silence its ``eagerness``
picks, and echoed as the client set it; an unknown eagerness changes nothing. An
unserved transcription model's error names the whisper models and the aliases."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from mlx_gateway.supervisor.api.realtime.routes import _unserved
from mlx_gateway.supervisor.api.realtime.settings import Settings, rendered, updated
from mlx_gateway.supervisor.api.realtime.vad import EAGERNESS_SILENCE_MS, TurnDetection
from mlx_gateway.supervisor.errors import BadRequest


def ga(turn_detection: Any) -> dict[str, Any]:
    return {"type": "realtime", "audio": {"input": {"turn_detection": turn_detection}}}


def echoed(settings: Settings, beta: bool = False) -> Any:
    session = rendered(settings, "sess_1", beta)
    return session["turn_detection"] if beta else session["audio"]["input"]["turn_detection"]


@pytest.mark.parametrize(
    ("eagerness", "silence_ms"), [("low", 1500), ("medium", 800), ("high", 500), ("auto", 800)]
)
def test_semantic_vad_is_the_server_vad_with_the_eagerness_silence(
    eagerness: str, silence_ms: int
) -> None:
    vad = {"type": "semantic_vad", "eagerness": eagerness, "create_response": False}
    new = updated(Settings(), ga(vad), beta=False)
    assert new.turn_detection == TurnDetection(
        silence_duration_ms=silence_ms,
        create_response=False,
        type="semantic_vad",
        eagerness=eagerness,
    )
    assert echoed(new) == {
        "type": "semantic_vad",
        "eagerness": eagerness,
        "create_response": False,
        "interrupt_response": True,
    }


def test_semantic_vad_without_eagerness_is_auto_in_either_dialect() -> None:
    # what the Agents SDK's RealtimeAgent sends by default
    vad = {"type": "semantic_vad", "interrupt_response": True}
    for beta, session in ((False, ga(vad)), (True, {"turn_detection": vad})):
        new = updated(Settings(), session, beta=beta)
        assert new.turn_detection is not None
        assert new.turn_detection.silence_duration_ms == EAGERNESS_SILENCE_MS["medium"]
        assert echoed(new, beta)["eagerness"] == "auto"


def test_server_vad_is_echoed_with_its_own_fields() -> None:
    vad = {"type": "server_vad", "silence_duration_ms": 400}
    assert echoed(updated(Settings(), ga(vad), beta=False)) == {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 400,
        "create_response": True,
        "interrupt_response": True,
    }


@pytest.mark.parametrize("eagerness", ["eager", "LOW", 3])
def test_an_unknown_eagerness_is_refused_naming_the_allowed_ones(eagerness: Any) -> None:
    current = Settings()
    vad = {"type": "semantic_vad", "eagerness": eagerness}
    with pytest.raises(BadRequest) as refused:
        updated(current, ga(vad), beta=False)
    assert refused.value.param == "session.audio.input.turn_detection.eagerness"
    if isinstance(eagerness, str):
        assert "'low', 'medium', 'high', 'auto'" in refused.value.message
    assert current.turn_detection == TurnDetection()  # nothing changed


def test_an_unknown_type_is_refused_naming_both() -> None:
    with pytest.raises(BadRequest) as refused:
        updated(Settings(), {"turn_detection": {"type": "push_to_talk"}}, beta=True)
    assert refused.value.param == "session.turn_detection.type"
    assert "'server_vad' and 'semantic_vad'" in refused.value.message


def test_an_unserved_transcription_model_names_the_whisper_models_and_aliases() -> None:
    handles: Any = [
        SimpleNamespace(name=name, config=SimpleNamespace(model_type=kind))
        for name, kind in (("tiny-lm", "lm"), ("whisper-turbo", "whisper"), ("kokoro", "tts"))
    ]
    error = _unserved("gpt-4o-mini-transcribe", handles)
    assert (error.status, error.code) == (404, "model_not_found")
    assert "whisper models served: whisper-turbo)" in error.message
    assert "aliases: [gpt-4o-mini-transcribe, gpt-4o-transcribe, whisper-1]" in error.message
    assert "aliases: [my-asr]" in _unserved("my-asr", handles[:1]).message
    assert "no whisper model" in _unserved("my-asr", handles[:1]).message
