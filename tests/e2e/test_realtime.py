"""The Realtime API (``/v1/realtime``) as the official ``openai`` SDK's realtime
client speaks it, unmodified (``client.realtime``, GA events, and
``client.beta.realtime``, the beta ones), against the ``mlx-gateway`` command
serving real workers: Whisper tiny.en (the espeak-ng fox clip), the tiny random
llama (text and grammar-forced tool calls) and the tiny random Soprano (speech).

Input audio is the fox clip resampled to the session's format, with silence
around it, so Silero VAD (server_vad) finds one turn in it.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from mlx_gateway.supervisor.api.realtime.audio import ULAW_TABLE
from mlx_gateway.workers.common.audio import decode_audio
from tests.fixtures.tiny_models import build_tiny_lm
from tests.fixtures.whisper import FOX_CLIPS

from .gateway import Gateway, wait_until

pytestmark = pytest.mark.slow

ASR, LM, TTS = "whisper-tiny.en", "tiny-lm", "tiny-tts"
OPENAI_NAMES = {
    ASR: ["gpt-4o-mini-transcribe", "gpt-4o-transcribe", "whisper-1"],
    LM: ["gpt-realtime"],
}
"""Aliases of the module's gateway: the names OpenAI's clients send by default."""
KEY = "sk-realtime-test"
TIMEOUT = 180
TTS_TOKENS = 6
"""Soprano tokens per sentence (64 ms of audio each)."""


def voice_models(
    asr: Path, lm: Path, tts: Path, *, tts_name: str = TTS, **tts_kwargs: object
) -> list[dict[str, Any]]:
    """The entries of a gateway that hears (whisper), thinks (the tiny lm) and speaks
    (the tiny Soprano, its ``generate_kwargs`` from ``tts_kwargs``)."""
    return [
        {"served_model_name": ASR, "model_path": str(asr), "model_type": "whisper"},
        {"served_model_name": LM, "model_path": str(lm)},
        {
            "served_model_name": tts_name,
            "model_path": str(tts),
            "model_type": "tts",
            "generate_kwargs": tts_kwargs,
        },
    ]


def user_text(text: str) -> dict[str, Any]:
    """A conversation item: the user's text message."""
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


@pytest.fixture(scope="module")
def gateway(
    tiny_en_path: Path,
    tiny_soprano_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Gateway]:
    # an lm that never ends by itself: a response that the tests cancel is still being
    # written on the worker when they cancel it, however busy the machine (the shared
    # tiny lm, 2048 positions, reaches the end of its context or EOS in seconds)
    lm = build_tiny_lm(tmp_path_factory.mktemp("endless-lm"), context_length=32768, eos_weight=-8.0)
    models = voice_models(tiny_en_path, lm, tiny_soprano_path, max_tokens=TTS_TOKENS)
    models[1]["tool_call_parser"] = "hermes"
    for entry in models[:2]:
        entry["aliases"] = OPENAI_NAMES[entry["served_model_name"]]
    gw = Gateway(tmp_path_factory.mktemp("realtime"), models, api_keys=[KEY])
    yield gw
    gw.stop()


def sdk(gateway: Gateway, key: str = KEY) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{gateway.base_url}/v1", api_key=key, max_retries=0)


def fox(rate: int, lead_s: float = 0.6, tail_s: float = 1.2) -> np.ndarray:
    """The fox clip at ``rate`` as int16, with silence before and after."""
    samples = np.concatenate(list(decode_audio(FOX_CLIPS[0].read_bytes())))
    at = np.interp(
        np.arange(0, len(samples) * rate / 16_000) * 16_000 / rate,
        np.arange(len(samples)),
        samples,
    )
    pcm = (np.clip(at, -1, 1) * 32767).astype("<i2")
    return np.concatenate(
        [np.zeros(int(lead_s * rate), "<i2"), pcm, np.zeros(int(tail_s * rate), "<i2")]
    )


def ulaw(samples: np.ndarray) -> bytes:
    """μ-law bytes of int16 samples (the nearest table entry: the inverse of G.711's
    expansion, which the gateway takes from the same standard)."""
    table = np.array(ULAW_TABLE)
    order = np.argsort(table)
    index = np.clip(np.searchsorted(table[order], samples), 0, 255)
    return bytes(order[index].astype(np.uint8))


async def append(conn: Any, data: bytes, chunk: int) -> None:
    for i in range(0, len(data), chunk):
        await conn.input_audio_buffer.append(audio=base64.b64encode(data[i : i + chunk]).decode())


async def until(conn: Any, wanted: str, timeout: float = TIMEOUT) -> list[Any]:
    """Events up to and including the first of type ``wanted``."""
    seen: list[Any] = []

    async def read() -> None:
        while True:
            event = await conn.recv()
            seen.append(event)
            if event.type == wanted:
                return
            assert event.type != "error", event.error

    try:
        await asyncio.wait_for(read(), timeout)
    except TimeoutError:
        raise AssertionError(f"no {wanted} in {[e.type for e in seen]}") from None
    return seen


def types(events: list[Any]) -> list[str]:
    return [e.type for e in events]


# ------------------------------------------------------------------ transcription


async def test_transcription_session_with_server_vad(gateway: Gateway) -> None:
    async with sdk(gateway).realtime.connect(extra_query={"intent": "transcription"}) as conn:
        created = await until(conn, "session.created")
        assert created[-1].session.type == "transcription"
        await conn.session.update(
            session={
                "type": "transcription",
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "transcription": {"model": ASR, "language": "en"},
                        "turn_detection": {"type": "server_vad", "silence_duration_ms": 400},
                    }
                },
            }
        )
        await until(conn, "session.updated")
        await append(conn, fox(24_000).tobytes(), 4800)  # 100 ms per event
        events = await until(conn, "conversation.item.input_audio_transcription.completed")
    kinds = types(events)
    for kind in (
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "input_audio_buffer.committed",
        "conversation.item.input_audio_transcription.delta",
    ):
        assert kind in kinds
    assert kinds.index("input_audio_buffer.speech_started") < kinds.index(
        "input_audio_buffer.speech_stopped"
    )
    started = events[kinds.index("input_audio_buffer.speech_started")]
    stopped = events[kinds.index("input_audio_buffer.speech_stopped")]
    # the clip's speech lies 0.6 s to ~3.4 s into the audio
    assert 100 <= started.audio_start_ms <= 900
    assert 2500 <= stopped.audio_end_ms <= 4000
    completed = events[-1]
    assert "lazy dog" in completed.transcript.lower()
    assert completed.item_id == stopped.item_id


# ------------------------------------------------------------------ conversation


async def test_conversation_answers_an_audio_turn_with_text_and_audio(gateway: Gateway) -> None:
    async with sdk(gateway).realtime.connect(model=LM) as conn:
        await until(conn, "session.created")
        await conn.session.update(
            session={
                "type": "realtime",
                "instructions": "Answer briefly.",
                "output_modalities": ["audio"],
                "max_output_tokens": 24,
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "transcription": {"model": ASR},
                        "turn_detection": {"type": "server_vad", "silence_duration_ms": 400},
                    },
                    "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "alloy"},
                },
            }
        )
        await until(conn, "session.updated")
        await append(conn, fox(24_000).tobytes(), 4800)
        events = await until(conn, "response.done")
    kinds = types(events)
    assert "conversation.item.input_audio_transcription.completed" in kinds
    for kind in (
        "input_audio_buffer.committed",
        "response.created",
        "response.output_item.added",
        "response.output_audio_transcript.delta",
        "response.output_audio.delta",
        "response.output_audio.done",
        "response.output_audio_transcript.done",
    ):
        assert kind in kinds, kind
    done = events[-1].response
    assert done.status in ("completed", "incomplete")
    assert done.usage.output_tokens == 24 and done.usage.input_tokens > 0
    audio = b"".join(
        base64.b64decode(e.delta) for e in events if e.type == "response.output_audio.delta"
    )
    samples = np.frombuffer(audio, "<i2")
    # pcm16 at 24 kHz: each sentence is TTS_TOKENS times 64 ms of audio
    sentence = TTS_TOKENS * 64 * 24
    assert len(samples) >= sentence * 0.98 and np.abs(samples).max() > 100
    transcript = next(e for e in events if e.type == "response.output_audio_transcript.done")
    assert transcript.transcript == "".join(
        e.delta for e in events if e.type == "response.output_audio_transcript.delta"
    )
    # each stage's time from the VAD's decision, in the gateway's log
    (line,) = [x for x in gateway.log().splitlines() if f"latency {done.id}:" in x]
    marks = dict(m.split("=") for m in line.split(": ", 2)[-1].split())
    assert list(marks) == ["vad", "transcribed", "first_token", "first_sentence", "first_audio"]
    ms = [int(v.removesuffix("ms")) for v in marks.values()]
    assert ms[0] >= 400 and ms[1:] == sorted(ms[1:]), line  # silence_duration_ms, in order


async def test_beta_client_text_in_g711_audio_out(gateway: Gateway) -> None:
    """The beta interface: flat session fields, ``response.audio.delta`` names, μ-law."""
    client = openai.AsyncOpenAI(
        base_url=f"{gateway.base_url}/v1",
        websocket_base_url=f"ws://127.0.0.1:{gateway.port}/v1",  # beta: wss unless told
        api_key=KEY,
        max_retries=0,
    )
    async with client.beta.realtime.connect(model=LM) as conn:
        created = await until(conn, "session.created")
        assert created[-1].session.input_audio_format == "pcm16"
        await conn.session.update(
            session={
                "modalities": ["text", "audio"],
                "input_audio_format": "g711_ulaw",
                "output_audio_format": "g711_ulaw",
                "input_audio_transcription": {"model": ASR},
                "turn_detection": None,
                "max_response_output_tokens": 16,
            }
        )
        updated = (await until(conn, "session.updated"))[-1]
        assert updated.session.output_audio_format == "g711_ulaw"
        # μ-law audio in a user item, transcribed by the whisper worker
        audio = ulaw(fox(8_000, 0.1, 0.1))
        await conn.conversation.item.create(
            item={
                "type": "message",
                "role": "user",
                "content": [{"type": "input_audio", "audio": base64.b64encode(audio).decode()}],
            }
        )
        events = await until(conn, "conversation.item.input_audio_transcription.completed")
        # 8 kHz telephone audio: tiny.en mishears the end, not the start
        assert "quick brown fox" in events[-1].transcript.lower()
        await conn.response.create()
        events = await until(conn, "response.done")
    kinds = types(events)
    assert "response.audio_transcript.delta" in kinds and "response.audio.delta" in kinds
    data = b"".join(base64.b64decode(e.delta) for e in events if e.type == "response.audio.delta")
    # G.711 at 8 kHz: one byte per sample
    assert len(data) >= TTS_TOKENS * 64 * 8 * 0.98
    assert max(abs(ULAW_TABLE[b]) for b in data) > 100
    assert events[-1].response.status in ("completed", "incomplete")


async def test_function_call_round_trip(gateway: Gateway) -> None:
    weather = {
        "type": "function",
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    }
    async with sdk(gateway).realtime.connect(model=LM) as conn:
        await until(conn, "session.created")
        await conn.session.update(
            session={
                "type": "realtime",
                "output_modalities": ["text"],
                "tools": [weather],
                "tool_choice": "required",
                "max_output_tokens": 400,
                "audio": {"input": {"turn_detection": None}},
            }
        )
        await until(conn, "session.updated")
        await conn.conversation.item.create(item=user_text("Weather in Paris?"))
        await conn.response.create()
        events = await until(conn, "response.done")
        kinds = types(events)
        assert "response.function_call_arguments.delta" in kinds, events[-1]
        call = next(e for e in events if e.type == "response.function_call_arguments.done")
        assert call.name == "get_weather"
        assert json.loads(call.arguments)["city"] in ("Paris", "Rome")
        done = events[-1].response
        assert done.output[0].type == "function_call" and done.output[0].call_id == call.call_id
        await conn.conversation.item.create(
            item={
                "type": "function_call_output",
                "call_id": call.call_id,
                "output": json.dumps({"weather": "sunny"}),
            }
        )
        await until(conn, "conversation.item.added")
        await conn.response.create(response={"tool_choice": "none", "max_output_tokens": 8})
        events = await until(conn, "response.done")
    assert "response.output_text.delta" in types(events)
    answer = events[-1].response
    assert answer.status in ("completed", "incomplete")
    assert answer.output[0].type == "message"
    assert answer.usage.input_tokens > done.usage.input_tokens  # it read the call's output


# ------------------------------------------------------------------ cancel, barge-in


async def test_response_cancel_stops_the_lm(gateway: Gateway) -> None:
    before = len(cancelled_lines(gateway, "generation"))
    async with sdk(gateway).realtime.connect(model=LM) as conn:
        await until(conn, "session.created")
        await conn.session.update(
            session={
                "type": "realtime",
                "output_modalities": ["text"],
                "max_output_tokens": "inf",
                "audio": {"input": {"turn_detection": None}},
            }
        )
        await conn.conversation.item.create(item=user_text("Talk."))
        await conn.response.create()
        await until(conn, "response.output_text.delta")
        await conn.response.cancel()
        events = await until(conn, "response.done")
        assert events[-1].response.status == "cancelled"
        assert events[-1].response.status_details.reason == "client_cancelled"
        # the session goes on: a second cancel has nothing to cancel
        await conn.response.cancel()
        error = (await until(conn, "error"))[-1]
        assert error.error.code == "response_cancel_not_active"
    lines = lambda: cancelled_lines(gateway, "generation")  # noqa: E731
    assert await asyncio.to_thread(wait_until, lambda: len(lines()) > before, 30), gateway.log()[
        -4000:
    ]
    tokens = int(lines()[-1].split("cancelled after")[1].split()[0])
    assert tokens < 16384


def inflight(gateway: Gateway, model: str) -> int:
    """The requests ``model`` has in flight, from ``/v1/models/{model}``."""
    headers = {"Authorization": f"Bearer {KEY}"}
    reply = httpx.get(f"{gateway.base_url}/v1/models/{model}", headers=headers, timeout=10)
    return int(reply.raise_for_status().json().get("inflight", 0))


def cancelled_lines(gateway: Gateway, what: str) -> list[str]:
    """The workers' log lines of cancelled requests (``generation …`` for the lm,
    ``speech …`` for the tts worker)."""
    return [
        line
        for line in gateway.log().splitlines()
        if f"{what} " in line and "cancelled after" in line
    ]


async def test_barge_in_cancels_the_response_and_truncates_it(gateway: Gateway) -> None:
    lm_before = len(cancelled_lines(gateway, "generation"))
    async with sdk(gateway).realtime.connect(model=LM) as conn:
        await until(conn, "session.created")
        await conn.session.update(
            session={
                "type": "realtime",
                "output_modalities": ["audio"],
                "max_output_tokens": "inf",
                "audio": {
                    "input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 400}}
                },
            }
        )
        await until(conn, "session.updated")
        audio = fox(24_000).tobytes()
        await append(conn, audio, 4800)
        await until(conn, "response.output_audio_transcript.delta")
        # the user speaks again while the answer is being written and spoken
        await append(conn, audio, 4800)
        events = await until(conn, "response.done")
        kinds = types(events)
        assert "input_audio_buffer.speech_started" in kinds
        done = events[-1].response
        assert done.status == "cancelled" and done.status_details.reason == "turn_detected"
        truncated = (await until(conn, "conversation.item.truncated"))[-1]
        assert truncated.item_id == done.output[0].id
        # the new turn is answered in its turn
        await until(conn, "response.created")
        await conn.response.cancel()
        await until(conn, "response.done")
    # the lm worker stopped the interrupted generation
    assert await asyncio.to_thread(
        wait_until, lambda: len(cancelled_lines(gateway, "generation")) > lm_before, 30
    ), gateway.log()[-4000:]


async def test_a_client_that_vanishes_frees_everything(gateway: Gateway) -> None:
    lm_before = len(cancelled_lines(gateway, "generation"))
    conn = await sdk(gateway).realtime.connect(model=LM).enter()
    await until(conn, "session.created")
    await conn.session.update(
        session={
            "type": "realtime",
            "output_modalities": ["text"],
            "max_output_tokens": "inf",
            "audio": {"input": {"turn_detection": None}},
        }
    )
    await conn.conversation.item.create(item=user_text("Go."))
    await conn.response.create()
    await until(conn, "response.output_text.delta")
    conn._connection.transport.abort()  # gone without a close frame
    assert await asyncio.to_thread(
        wait_until, lambda: len(cancelled_lines(gateway, "generation")) > lm_before, 30
    ), gateway.log()[-4000:]
    headers = {"Authorization": f"Bearer {KEY}"}
    model = lambda: httpx.get(f"{gateway.base_url}/v1/models/{LM}", headers=headers).json()  # noqa: E731
    assert await asyncio.to_thread(wait_until, lambda: model().get("inflight") == 0, 30), model()
    assert "realtime session" in gateway.log() and "closed" in gateway.log()


# ------------------------------------------------------------------ errors, auth


async def test_bad_events_are_error_events_and_the_session_goes_on(gateway: Gateway) -> None:
    async with sdk(gateway).realtime.connect(model=LM) as conn:
        await until(conn, "session.created")
        ws = conn._connection  # the SDK's own socket: raw frames the SDK would not build
        await ws.send("not json")
        assert (await until(conn, "error"))[-1].error.code == "invalid_json"
        await ws.send(json.dumps({"type": "no.such.event", "event_id": "e1"}))
        error = (await until(conn, "error"))[-1].error
        assert error.code == "invalid_value" and error.event_id == "e1"
        await conn.input_audio_buffer.append(audio="%%% not base64")
        assert (await until(conn, "error"))[-1].error.param == "audio"
        await conn.input_audio_buffer.commit()
        assert (await until(conn, "error"))[-1].error.code == "input_audio_buffer_commit_empty"
        await conn.session.update(
            session={"type": "realtime", "audio": {"output": {"format": {"type": "audio/ogg"}}}}
        )
        assert (await until(conn, "error"))[-1].error.param == "session.audio.output.format"
        await conn.conversation.item.delete(item_id="item_missing")
        assert (await until(conn, "error"))[-1].error.code == "item_not_found"
        # still usable
        await conn.conversation.item.create(item=user_text("Hi"))
        assert (await until(conn, "conversation.item.added"))[-1].item.role == "user"


async def test_keys_are_checked_at_the_handshake(gateway: Gateway) -> None:
    with pytest.raises(Exception) as failure:
        async with sdk(gateway, "sk-wrong").realtime.connect(model=LM) as conn:
            await conn.recv()
    assert "401" in str(failure.value)
    # an unknown model: an error event says so before the socket closes
    async with sdk(gateway).realtime.connect(model="nobody") as conn:
        event = await conn.recv()
        assert event.type == "error" and event.error.code == "model_not_found"
    response = httpx.get(
        f"{gateway.base_url}/v1/models", headers={"Authorization": f"Bearer {KEY}"}
    )
    assert response.status_code == 200
