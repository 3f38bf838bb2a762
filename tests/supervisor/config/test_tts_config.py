"""Config keys of text-to-speech (tts) models, and the Wyoming server section."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mlx_gateway.supervisor.config import ConfigError, load_config
from mlx_gateway.supervisor.config.kinds.tts import OPENAI_VOICES
from mlx_gateway.supervisor.pool.worker_spec import spec_for

KOKORO = "mlx-community/Kokoro-82M-bf16"
WHISPER = "mlx-community/whisper-large-v3-turbo"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_a_tts_entry_and_what_its_worker_is_told(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            f"""
            models:
              - model_path: {KOKORO}
                served_model_name: kokoro
                aliases: [tts-1]
                model_type: tts
                voice: af_heart
                voices: {{alloy: af_bella, narrator: bm_george}}
                max_input_chars: 500
                generate_kwargs: {{lang_code: b}}
            """,
        )
    )
    (model,) = config.models
    assert (model.worker_kind, model.max_input_chars) == ("tts", 500)
    options = spec_for(model, "w1").options
    assert options == model.worker_options()
    assert options["voice"] == "af_heart"
    assert options["generate_kwargs"] == {"lang_code": "b"}
    aliases = options["voice_aliases"]
    assert aliases["alloy"] == "af_bella" and aliases["narrator"] == "bm_george"
    assert all(aliases[name] is None for name in OPENAI_VOICES if name != "alloy")


def test_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, f"models: [{{model_path: {KOKORO}, model_type: tts}}]")
    (model,) = load_config(path).models
    assert model.max_input_chars == 4096
    assert model.worker_options() == {"voice_aliases": dict.fromkeys(OPENAI_VOICES)}


@pytest.mark.parametrize(
    "key, value", [("max_input_chars", 100), ("voice", "af_heart"), ("voices", {"a": "b"})]
)
def test_tts_keys_on_another_kind_are_refused(tmp_path: Path, key: str, value: object) -> None:
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: {WHISPER}
            model_type: whisper
            {key}: {value}
        """,
    )
    with pytest.raises(ConfigError, match=rf"{key} applies to text-to-speech models"):
        load_config(path)


def test_wyoming_section(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        server:
          wyoming: {{host: 0.0.0.0, models: [whisper, tts-1], languages: [de]}}
        models:
          - {{model_path: {WHISPER}, served_model_name: whisper, model_type: whisper}}
          - {{model_path: {KOKORO}, served_model_name: kokoro, aliases: [tts-1], model_type: tts}}
        """,
    )
    wyoming = load_config(path).server.wyoming
    assert wyoming is not None
    assert (wyoming.host, wyoming.port, wyoming.languages) == ("0.0.0.0", 10300, ["de"])
    assert wyoming.zeroconf is False


@pytest.mark.parametrize(
    "name, reason", [("nobody", "is not a model of this file"), ("chat", "is no speech model")]
)
def test_wyoming_models_must_be_speech_models(tmp_path: Path, name: str, reason: str) -> None:
    path = write(
        tmp_path,
        f"""
        server:
          wyoming: {{models: [{name}]}}
        models:
          - {{model_path: {KOKORO}, served_model_name: kokoro, model_type: tts}}
          - {{model_path: mlx-community/Qwen3-0.6B-4bit, served_model_name: chat}}
        """,
    )
    with pytest.raises(ConfigError, match=rf"server\.wyoming\.models\[0\].*{reason}.*kokoro"):
        load_config(path)
