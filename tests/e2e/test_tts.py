"""Text to speech for real: the ``mlx-gateway`` command serving the tiny random
Soprano (mlx-audio) to the official OpenAI SDK, every response format decoded by
PyAV, streams, voices, limits, a failing model, and a client that leaves."""

from __future__ import annotations

import base64
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path

import av
import httpx
import openai
import pytest

from tests.fixtures.tiny_soprano import SAMPLE_RATE, TOKEN_SAMPLES

from .gateway import Gateway, wait_until

pytestmark = pytest.mark.slow

MODEL = "tiny-tts"
TOKENS = 6
SENTENCE_SECONDS = TOKENS * TOKEN_SAMPLES / SAMPLE_RATE  # 0.384 s per sentence
RATES = {"mp3": SAMPLE_RATE, "opus": 48_000, "aac": SAMPLE_RATE, "flac": SAMPLE_RATE}
RATES |= {"wav": SAMPLE_RATE, "pcm": 24_000}
ONE = "The quick brown fox jumps over the lazy dog."
THREE = f"{ONE} It was a sunny day. Nobody saw it happen!"
LONG = " ".join(f"This is sentence number {i} of a long story." for i in range(60))


@pytest.fixture(scope="module")
def gateway(tiny_soprano_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = Gateway(
        tmp_path_factory.mktemp("tts"),
        [
            {
                "served_model_name": MODEL,
                "aliases": ["tts-1", "gpt-4o-mini-tts"],
                "model_path": str(tiny_soprano_path),
                "model_type": "tts",
                "max_input_chars": 3000,
                "max_concurrency": 1,
                "voices": {"narrator": "default"},
                "generate_kwargs": {"max_tokens": TOKENS},
            },
            {
                # mlx-audio loads it, but its generate fails on every request
                "served_model_name": "broken-tts",
                "model_path": str(tiny_soprano_path),
                "model_type": "tts",
                "generate_kwargs": {"max_tokens": TOKENS, "temperature": "hot"},
            },
        ],
    )
    yield gw
    gw.stop()


@pytest.fixture
def client(gateway: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=f"{gateway.base_url}/v1", api_key="unused", timeout=120, max_retries=0
    ) as sdk:
        yield sdk


def decoded(data: bytes, fmt: str) -> tuple[int, float]:
    """(sample rate, seconds) of an audio file, decoded by PyAV."""
    if fmt == "pcm":
        return 24_000, len(data) / 2 / 24_000
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        samples = sum(frame.samples for frame in container.decode(stream))
        return stream.rate, samples / stream.rate


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_sdk_speech_create_in_every_format(client: openai.OpenAI, fmt: str) -> None:
    seconds = []
    for text in (ONE, THREE):
        reply = client.audio.speech.create(
            model="tts-1", voice="alloy", input=text, response_format=fmt
        )
        rate, length = decoded(reply.read(), fmt)
        assert rate == RATES[fmt]
        seconds.append(length)
    assert seconds[0] == pytest.approx(SENTENCE_SECONDS, abs=0.1)
    assert seconds[1] == pytest.approx(3 * SENTENCE_SECONDS, abs=0.1)


def test_sdk_streaming_response_gives_bytes_as_they_come(client: openai.OpenAI) -> None:
    with client.audio.speech.with_streaming_response.create(
        model=MODEL, voice="narrator", input=THREE, response_format="pcm", speed=1.0
    ) as response:
        assert response.headers["content-type"] == "audio/pcm"
        assert response.headers["x-sample-rate"] == "24000"
        pieces = [piece for piece in response.iter_bytes() if piece]
    data = b"".join(pieces)
    assert len(data) == pytest.approx(3 * SENTENCE_SECONDS * 24_000 * 2, rel=0.02)
    assert len(pieces) >= 3  # one write per sentence at least


def test_speed(client: openai.OpenAI) -> None:
    # Soprano has no speed setting: the worker changes the tempo of its samples
    reply = client.audio.speech.create(
        model=MODEL, voice="alloy", input=THREE, response_format="mp3", speed=2.0
    )
    rate, seconds = decoded(reply.read(), "mp3")
    assert rate == SAMPLE_RATE
    assert seconds == pytest.approx(3 * SENTENCE_SECONDS / 2, abs=0.1)


def test_sse_stream_format(client: openai.OpenAI) -> None:
    with client.audio.speech.with_streaming_response.create(
        model=MODEL, voice="alloy", input=THREE, response_format="wav", stream_format="sse"
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [
            json.loads(line.removeprefix("data: "))
            for line in response.iter_lines()
            if line.startswith("data: ")
        ]
    kinds = [event["type"] for event in events]
    assert kinds[-1] == "speech.audio.done"
    assert set(kinds[:-1]) == {"speech.audio.delta"} and len(kinds) >= 4
    audio = b"".join(base64.b64decode(event["audio"]) for event in events[:-1])
    rate, seconds = decoded(audio, "wav")
    assert rate == SAMPLE_RATE
    assert seconds == pytest.approx(3 * SENTENCE_SECONDS, abs=0.05)
    usage = events[-1]["usage"]
    assert usage["input_tokens"] == len(THREE)
    assert usage["output_tokens"] == round(3 * SENTENCE_SECONDS * 1000)


def test_voice_as_an_object_and_voices_listed(client: openai.OpenAI, gateway: Gateway) -> None:
    reply = client.audio.speech.create(
        model=MODEL, voice={"id": "default"}, input=ONE, response_format="flac"
    )
    assert decoded(reply.read(), "flac")[0] == SAMPLE_RATE
    listed = httpx.get(f"{gateway.base_url}/v1/audio/voices", params={"model": MODEL}).json()
    names = [voice["id"] for voice in listed["data"]]
    assert names[0] == "default"
    assert {"alloy", "narrator", "verse"} <= set(names)
    assert {voice["model"] for voice in listed["data"]} == {MODEL}
    entry = gateway.model(MODEL)  # /v1/models/{id} tells them too, once loaded
    assert entry["voices"] == names and entry["sample_rate"] == SAMPLE_RATE


def test_unknown_voice_is_a_400_at_once(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.audio.speech.create(model=MODEL, voice="nobody", input=ONE)
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["param"] == "voice" and error["code"] == "unknown_voice"
    assert "default, alloy" in error["message"]


def test_bad_requests(client: openai.OpenAI, gateway: Gateway) -> None:
    with pytest.raises(openai.NotFoundError):
        client.audio.speech.create(model="no-such-model", voice="alloy", input=ONE)
    with pytest.raises(openai.BadRequestError, match="max_input_chars"):
        client.audio.speech.create(model=MODEL, voice="alloy", input="a" * 3001)
    with pytest.raises(openai.BadRequestError, match="empty"):
        client.audio.speech.create(model=MODEL, voice="alloy", input="  ")
    with pytest.raises(openai.BadRequestError, match="speed"):
        client.audio.speech.create(model=MODEL, voice="alloy", input=ONE, speed=9)
    bad = httpx.post(
        f"{gateway.base_url}/v1/audio/speech",
        json={"model": MODEL, "input": ONE, "response_format": "ogg"},
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "response_format"


def test_a_failing_model_is_an_error_not_an_empty_200(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        client.audio.speech.create(model="broken-tts", voice="alloy", input=ONE)
    assert "generation failed" in str(caught.value)
    streamed = client.audio.speech.with_streaming_response
    with (
        pytest.raises(openai.InternalServerError),
        streamed.create(
            model="broken-tts", voice="alloy", input=ONE, response_format="pcm"
        ) as response,
    ):
        response.read()


def test_a_client_that_leaves_stops_the_synthesis(gateway: Gateway) -> None:
    """The worker logs a cancel only for a request it was still synthesizing."""
    cancelled = re.compile(r"speech (tts-\w+) cancelled after ([\d.]+) s of audio")
    before = len(cancelled.findall(gateway.log()))
    body = {"model": MODEL, "voice": "alloy", "input": LONG, "response_format": "pcm"}
    with httpx.stream("POST", f"{gateway.base_url}/v1/audio/speech", json=body) as response:
        assert response.status_code == 200
        first = next(piece for piece in response.iter_raw() if piece)
        assert first  # audio arrived while 59 more sentences were to come
    assert wait_until(lambda: len(cancelled.findall(gateway.log())) > before, timeout=30)
    _, seconds = cancelled.findall(gateway.log())[before]
    assert float(seconds) < 60 * SENTENCE_SECONDS
    # and the model is free for the next request
    again = httpx.post(
        f"{gateway.base_url}/v1/audio/speech",
        json={"model": MODEL, "input": ONE, "response_format": "pcm"},
        timeout=60,
    )
    assert again.status_code == 200 and len(again.content) > 0


def test_metrics_count_characters_and_audio_seconds(
    client: openai.OpenAI, gateway: Gateway
) -> None:
    def figures() -> tuple[float, float]:
        text = httpx.get(f"{gateway.base_url}/metrics").text
        pattern = r'mlx_gateway_tts_{}_total{{model="{}"}} ([\d.e+-]+)'
        chars = re.search(pattern.format("characters", MODEL), text)
        secs = re.search(pattern.format("audio_seconds", MODEL), text)
        return (float(chars[1]) if chars else 0.0, float(secs[1]) if secs else 0.0)

    chars, seconds = figures()
    client.audio.speech.create(model=MODEL, voice="alloy", input=THREE).read()
    assert wait_until(lambda: figures()[0] == chars + len(THREE), timeout=10)
    assert figures()[1] == pytest.approx(seconds + 3 * SENTENCE_SECONDS, abs=0.01)
