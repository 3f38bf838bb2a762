"""The ``realtime:`` section: the speech models of ``/v1/realtime`` sessions."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mlx_gateway.supervisor.config import ConfigError, load_config

MODELS = """
models:
  - {model_path: mlx-community/whisper-large-v3-turbo, served_model_name: whisper,
     model_type: whisper}
  - {model_path: mlx-community/Kokoro-82M-bf16, served_model_name: kokoro, aliases: [tts-1],
     model_type: tts}
  - {model_path: mlx-community/Qwen3-0.6B-4bit, served_model_name: chat}
"""


def load(tmp_path: Path, section: str) -> object:
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(section) + MODELS)
    return load_config(path)


def test_left_out_the_section_chooses_nothing(tmp_path: Path) -> None:
    realtime = load(tmp_path, "").realtime  # type: ignore[attr-defined]
    assert (realtime.transcription_model, realtime.speech_model, realtime.voice) == (None,) * 3


def test_early_transcription_is_on_unless_turned_off(tmp_path: Path) -> None:
    assert load(tmp_path, "").realtime.early_transcription is True  # type: ignore[attr-defined]
    section = "realtime: {early_transcription: false}\n"
    assert load(tmp_path, section).realtime.early_transcription is False  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="early_transcription"):
        load(tmp_path, "realtime: {early_transcription: soon}\n")


def test_it_names_a_whisper_and_a_tts_entry(tmp_path: Path) -> None:
    section = "realtime: {transcription_model: whisper, speech_model: tts-1, voice: af_heart}\n"
    realtime = load(tmp_path, section).realtime  # type: ignore[attr-defined]
    assert (realtime.transcription_model, realtime.speech_model) == ("whisper", "tts-1")
    assert realtime.voice == "af_heart"


@pytest.mark.parametrize(
    "section, match",
    [
        (
            "realtime: {speech_model: whisper}\n",
            r"realtime\.speech_model.*serves no speech.*kokoro",
        ),
        ("realtime: {transcription_model: chat}\n", r"realtime\.transcription_model.*whisper"),
        ("realtime: {speech_model: nobody}\n", r"is not a model of this file"),
        ("realtime: {turn_detection: none}\n", r"turn_detection"),
    ],
)
def test_wrong_names_are_refused(tmp_path: Path, section: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load(tmp_path, section)
