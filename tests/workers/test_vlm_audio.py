"""The audio of ``input_audio`` parts for omni vision models (PyAV, no model):
decoding real files to the feature extractor's rate, the errors, and which mlx-vlm
models count as taking audio."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mlx_gateway.workers import vlm_audio
from mlx_gateway.workers.base import RequestError
from mlx_gateway.workers.vlm_audio import decode_input_audio, sampling_rate, takes_audio
from tests.workers.test_audio_decoding import encode

WHERE = "messages[0].content[0].input_audio"


@pytest.mark.parametrize(
    ("container", "codec"), [("wav", "pcm_s16le"), ("mp3", "libmp3lame"), ("flac", "flac")]
)
def test_a_stereo_file_becomes_mono_samples_at_the_models_rate(container: str, codec: str) -> None:
    samples = decode_input_audio(encode(container, codec), where=WHERE, rate=24_000)
    assert samples.dtype == np.float32 and samples.ndim == 1
    assert abs(samples.size - 24_000) < 2_400  # one second (codecs pad a little)
    # the 0.4 tone (FFmpeg down-mixes stereo at -3 dB per channel: up to 0.4·√2)
    assert 0.3 < float(np.abs(samples).max()) < 0.6


def test_not_audio_is_a_400_naming_the_part() -> None:
    with pytest.raises(RequestError) as caught:
        decode_input_audio(b"this is not a sound file", where=WHERE, rate=16_000)
    assert caught.value.status == 400 and WHERE in str(caught.value)
    with pytest.raises(RequestError, match="empty"):
        decode_input_audio(b"", where=WHERE, rate=16_000)


def test_too_long_audio_is_413(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vlm_audio, "MAX_AUDIO_SECONDS", 0.5)
    with pytest.raises(RequestError) as caught:
        decode_input_audio(encode("wav", "pcm_s16le"), where=WHERE, rate=16_000)
    assert caught.value.status == 413 and "0.5 seconds" in str(caught.value)


def test_which_models_take_audio() -> None:
    assert takes_audio(SimpleNamespace(audio_tower=object()))  # Gemma 3n, MiniCPM-o
    assert takes_audio(SimpleNamespace(audio_encoder=object()))  # Phi-4-multimodal
    assert takes_audio(SimpleNamespace(thinker=SimpleNamespace(audio_tower=object())))
    assert not takes_audio(SimpleNamespace(audio_tower=None))  # Gemma 4 without audio
    assert not takes_audio(SimpleNamespace(vision_tower=object()))
    assert sampling_rate(SimpleNamespace(feature_extractor=SimpleNamespace(sampling_rate=24_000)))
    assert sampling_rate(SimpleNamespace()) == 16_000


@pytest.mark.slow
def test_the_tiny_qwen2_vl_takes_no_audio(tiny_vlm_path: Path) -> None:
    from mlx_vlm import load

    model, _ = load(str(tiny_vlm_path))
    assert not takes_audio(model)
