"""The audio of ``input_audio`` parts for omni vision models (PyAV, no model):
decoding real files to the feature extractor's rate, the errors, and which mlx-vlm
models count as taking audio."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mlx_gateway.workers.runtime.contract import RequestError
from mlx_gateway.workers.vlm import audio_input as vlm_audio
from mlx_gateway.workers.vlm.audio_input import decode_input_audio, sampling_rate, takes_audio
from tests.workers.common.test_audio_decoding import encode

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


def _silence() -> bytes:
    import io

    import av

    buffer = io.BytesIO()
    with av.open(buffer, "w", format="wav") as out:
        stream = out.add_stream("pcm_s16le", rate=16_000, layout="mono")
        frame = av.AudioFrame.from_ndarray(
            np.zeros((1, 16_000), dtype=np.int16), format="s16", layout="mono"
        )
        frame.sample_rate = 16_000
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    return buffer.getvalue()


@pytest.mark.slow
def test_an_omni_model_hears_the_audio(tiny_omni_path: Path) -> None:
    from mlx_gateway.protocol.messages import Generate, SamplingParams
    from tests.workers.vlm.test_vlm_backend import Run

    run = Run(tiny_omni_path)
    assert takes_audio(run.backend.model)

    def ask(request_id: str, files: list[bytes], clips: int = 1) -> None:
        audio = [{"type": "audio", "format": "wav", "payload": k} for k in range(clips)]
        text = {"type": "text", "text": "what is said here?"}
        messages = [{"role": "user", "content": [*audio, text]}]
        sampling = SamplingParams(max_tokens=6, temperature=0.0)
        run.submit(Generate(request_id=request_id, messages=messages, sampling=sampling), files)
        run.drain()

    tone = encode("wav", "pcm_s16le", rate=16_000, layout="mono")
    ask("tone", [tone])
    ask("silence", [_silence()])
    ask("none", [], clips=0)
    # One second at 40 ms a token: 25 audio tokens between <start_of_audio> and
    # <end_of_audio>, added to the prompt of the same text without audio.
    heard = run.started("tone").prompt_tokens - run.started("none").prompt_tokens
    assert heard == 25 + 2
    assert run.started("silence").prompt_tokens == run.started("tone").prompt_tokens
    assert run.text("tone") and run.events("tone")[-1].finish_reason == "length"
    # The prefix cache tells clips apart: the same tokens with other audio are not
    # served from the cache.
    assert run.started("silence").cached_tokens == 0
    # Same tokens, other audio: the audio encoder's output is in the prompt's input
    # embeddings (the random weights' text barely changes, the embeddings do).
    embeds = {}
    for name, clip in (("tone", tone), ("again", tone), ("silence", _silence())):
        audio = {"type": "audio", "format": "wav", "payload": 0}
        messages = [{"role": "user", "content": [audio, {"type": "text", "text": "hi"}]}]
        prompt = run.backend.prompts.prompt(Generate(request_id=name, messages=messages), [clip])
        embeds[name] = np.array(prompt.kwargs["inputs_embeds"])
    assert np.array_equal(embeds["tone"], embeds["again"])
    assert not np.allclose(embeds["tone"], embeds["silence"])

    # Gemma 4's processor takes several clips, each with its own markers.
    ask("two", [tone, _silence()], clips=2)
    assert run.started("two").prompt_tokens == run.started("none").prompt_tokens + 2 * heard
    # A processor that takes one clip per prompt (mlx-vlm would drop the others).
    run.backend.processor.supports_multiple_audio = False
    ask("one only", [tone, tone], clips=2)
    (error,) = run.events("one only")
    assert getattr(error, "code", None) == "too_many_audio_clips"
    run.backend.processor.supports_multiple_audio = True
    ask("noise", [b"not audio at all"])
    (error,) = run.events("noise")
    assert getattr(error, "status", None) == 400
    assert "messages[0].content[0].input_audio" in getattr(error, "message", "")
