"""The Wyoming server as Home Assistant uses it: the ``wyoming`` package's own client
against the ``mlx-gateway`` command serving Whisper tiny.en (speech to text, the
espeak-ng fox clip) and the tiny random Soprano (text to speech)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from wyoming.asr import Transcribe, Transcript
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.ping import Ping, Pong
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from mlx_gateway.workers.common.audio import decode_audio
from tests.fixtures.tiny_soprano import SAMPLE_RATE, TOKEN_SAMPLES
from tests.fixtures.whisper import FOX_CLIPS

from .gateway import Gateway, free_port, wait_until

pytestmark = pytest.mark.slow

ASR, TTS = "whisper-tiny.en", "tiny-tts"
TOKENS = 6
SENTENCE_SAMPLES = round(TOKENS * TOKEN_SAMPLES / SAMPLE_RATE * 24_000)  # at 24 kHz
ONE = "The quick brown fox jumps over the lazy dog."
THREE = f"{ONE} It was a sunny day. Nobody saw it happen!"
TIMEOUT = 300


@pytest.fixture(scope="module")
def gateway(
    tiny_en_path: Path, tiny_soprano_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    port = free_port()
    gw = Gateway(
        tmp_path_factory.mktemp("wyoming"),
        [
            {"served_model_name": ASR, "model_path": str(tiny_en_path), "model_type": "whisper"},
            {
                "served_model_name": TTS,
                "model_path": str(tiny_soprano_path),
                "model_type": "tts",
                "voices": {"narrator": "default"},
                "generate_kwargs": {"max_tokens": TOKENS},
            },
        ],
        wyoming={"port": port, "languages": ["en"]},
    )
    gw.wyoming_port = port  # type: ignore[attr-defined]
    yield gw
    gw.stop()


def client(gateway: Gateway) -> AsyncTcpClient:
    return AsyncTcpClient("127.0.0.1", gateway.wyoming_port)  # type: ignore[attr-defined]


async def read(client: AsyncTcpClient) -> Event:
    event = await asyncio.wait_for(client.read_event(), TIMEOUT)
    assert event is not None, "the server closed the connection"
    return event


async def read_audio(client: AsyncTcpClient) -> bytes:
    """One ``audio-start`` … ``audio-stop`` answer: its PCM (24 kHz, 16-bit, mono)."""
    event = await read(client)
    assert AudioStart.is_type(event.type), event
    start = AudioStart.from_event(event)
    assert (start.rate, start.width, start.channels) == (24_000, 2, 1)
    pcm = b""
    while True:
        event = await read(client)
        if AudioStop.is_type(event.type):
            return pcm
        assert AudioChunk.is_type(event.type), event
        pcm += AudioChunk.from_event(event).audio


async def test_describe_lists_the_speech_models(gateway: Gateway) -> None:
    async with client(gateway) as c:
        await c.write_event(Describe().event())
        info = Info.from_event(await read(c))
    assert [m.name for p in info.asr for m in p.models] == [ASR]
    assert info.asr[0].models[0].languages == ["en"]
    (tts,) = info.tts
    assert tts.supports_synthesize_streaming
    (voice,) = tts.voices
    assert voice.name == TTS and voice.languages == ["en"]
    assert voice.speakers is not None
    assert {"default", "narrator"} <= {s.name for s in voice.speakers}


async def test_transcribe_the_fox(gateway: Gateway) -> None:
    samples = np.concatenate(list(decode_audio(FOX_CLIPS[0].read_bytes())))
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes()
    audio = {"rate": 16_000, "width": 2, "channels": 1}
    async with client(gateway) as c:
        await c.write_event(Transcribe(name=ASR, language="en").event())
        await c.write_event(AudioStart(**audio).event())
        for i in range(0, len(pcm), 2048):
            await c.write_event(AudioChunk(audio=pcm[i : i + 2048], **audio).event())
        await c.write_event(AudioStop().event())
        event = await read(c)
    assert Transcript.is_type(event.type), event
    assert "lazy dog" in Transcript.from_event(event).text.lower()


async def test_synthesize(gateway: Gateway) -> None:
    async with client(gateway) as c:
        await c.write_event(Synthesize(text=THREE, voice=SynthesizeVoice(name=TTS)).event())
        pcm = await read_audio(c)
        # a second request on the same connection, with a speaker (one of its voices)
        voice = SynthesizeVoice(name=TTS, speaker="narrator")
        await c.write_event(Synthesize(text=ONE, voice=voice).event())
        one = await read_audio(c)
    assert len(pcm) // 2 == pytest.approx(3 * SENTENCE_SAMPLES, rel=0.02)
    assert len(one) // 2 == pytest.approx(SENTENCE_SAMPLES, rel=0.02)
    assert np.abs(np.frombuffer(pcm, "<i2")).max() > 100  # sound, not silence


async def test_streaming_synthesis_speaks_each_sentence_as_it_completes(
    gateway: Gateway,
) -> None:
    voice = SynthesizeVoice(name=TTS)
    async with client(gateway) as c:
        await c.write_event(SynthesizeStart(voice=voice).event())
        await c.write_event(SynthesizeChunk(text="The quick brown fox jumps ").event())
        await c.write_event(SynthesizeChunk(text="over the lazy dog. It was").event())
        # the first sentence is spoken while the rest is still being written
        first = await read_audio(c)
        await c.write_event(SynthesizeChunk(text=" a sunny day. Nobody saw").event())
        second = await read_audio(c)
        await c.write_event(SynthesizeChunk(text=" it happen!").event())
        # what Home Assistant sends along for servers without streaming: ignored here
        await c.write_event(Synthesize(text=THREE, voice=voice).event())
        await c.write_event(SynthesizeStop().event())
        third = await read_audio(c)
        assert SynthesizeStopped.is_type((await read(c)).type)
        await c.write_event(Ping(text="still there").event())
        assert Pong.is_type((await read(c)).type)  # no audio of the ignored synthesize
    for pcm in (first, second, third):
        assert len(pcm) // 2 == pytest.approx(SENTENCE_SAMPLES, rel=0.02)


async def test_errors_are_error_events_and_the_connection_stays(gateway: Gateway) -> None:
    async with client(gateway) as c:
        voice = SynthesizeVoice(name=TTS, speaker="nobody")
        await c.write_event(Synthesize(text=ONE, voice=voice).event())
        event = await read(c)
        assert Error.is_type(event.type)
        error = Error.from_event(event)
        assert error.code == "unknown_voice" and "nobody" in error.text
        await c.write_event(AudioStop().event())  # audio-stop without audio
        assert Error.is_type((await read(c)).type)
        await c.write_event(Synthesize(text=ONE).event())  # the first model, its default
        assert len(await read_audio(c)) // 2 == pytest.approx(SENTENCE_SAMPLES, rel=0.02)


async def test_wyoming_requests_are_in_the_metrics(gateway: Gateway) -> None:
    def characters() -> float:
        for line in httpx.get(f"{gateway.base_url}/metrics").text.splitlines():
            if line.startswith(f'mlx_gateway_tts_characters_total{{model="{TTS}"}}'):
                return float(line.split()[-1])
        return 0.0

    before = characters()
    async with client(gateway) as c:
        await c.write_event(Synthesize(text=ONE, voice=SynthesizeVoice(name=TTS)).event())
        await read_audio(c)
    assert wait_until(lambda: characters() == before + len(ONE), timeout=10)


async def test_a_client_that_leaves_stops_the_synthesis(gateway: Gateway) -> None:
    long = " ".join(f"This is sentence number {i} of a long story." for i in range(60))
    marker = "cancelled after"
    before = gateway.log().count(marker)
    c = client(gateway)
    await c.connect()
    await c.write_event(Synthesize(text=long, voice=SynthesizeVoice(name=TTS)).event())
    assert AudioStart.is_type((await read(c)).type)
    assert AudioChunk.is_type((await read(c)).type)
    await c.disconnect()
    assert await asyncio.to_thread(wait_until, lambda: gateway.log().count(marker) > before, 30)
