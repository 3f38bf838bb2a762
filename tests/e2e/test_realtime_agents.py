"""The Agents SDK's ``RealtimeAgent`` (openai-agents), unmodified and with its
default settings, against ``/v1/realtime``: its model pointed at the gateway by
``model_config``'s ``url`` and ``api_key`` only. Its defaults name OpenAI's:
``semantic_vad`` (served by the server VAD, echoed as sent) and
``gpt-4o-mini-transcribe`` (an alias of the whisper entry, as ``gpt-realtime`` in
the url is of the lm's). A text turn is answered with the agent's audio from the
real workers (the tiny lm, the tiny Soprano); then the fox clip, spoken into the
session, ends its turn by the VAD and is transcribed by Whisper tiny.en."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents.realtime import RealtimeAgent, RealtimeRunner

from ..fixtures.tiny_models import build_tiny_lm
from .gateway import Gateway
from .test_realtime import KEY, OPENAI_NAMES, TTS_TOKENS, fox, voice_models

pytestmark = pytest.mark.slow

TIMEOUT = 180


ANSWER_TOKENS = 12
"""The lm entry's default ``max_tokens``: the agent sets none (its defaults), and an
answer of the endless tiny lm to the end of its context, spoken sentence by sentence,
took minutes of TTS on a 2-core machine (the SDK queued 14,245 events)."""


@pytest.fixture(scope="module")
def gateway(
    tiny_en_path: Path, tiny_soprano_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """test_realtime's voice gateway, its lm answering at most ANSWER_TOKENS tokens."""
    lm = build_tiny_lm(tmp_path_factory.mktemp("endless-lm"), context_length=32768, eos_weight=-8.0)
    models = voice_models(tiny_en_path, lm, tiny_soprano_path, max_tokens=TTS_TOKENS)
    models[1]["max_tokens"] = ANSWER_TOKENS
    for entry in models[:2]:
        entry["aliases"] = OPENAI_NAMES[entry["served_model_name"]]
    gw = Gateway(tmp_path_factory.mktemp("realtime-agents"), models, api_keys=[KEY])
    yield gw
    gw.stop()


def server_event(event: Any) -> dict[str, Any] | None:
    """The gateway's event inside a session event, if it carries one."""
    if event.type == "raw_model_event" and event.data.type == "raw_server_event":
        data: dict[str, Any] = event.data.data
        return data
    return None


async def test_a_realtime_agent_with_its_defaults(gateway: Gateway) -> None:
    agent = RealtimeAgent(name="Assistant", instructions="Answer briefly.")
    runner = RealtimeRunner(agent)
    url = f"ws://127.0.0.1:{gateway.port}/v1/realtime?model=gpt-realtime"
    session = await runner.run(model_config={"url": url, "api_key": KEY})
    seen: list[str] = []
    updates: list[dict[str, Any]] = []
    transcripts: list[str] = []
    audio = 0

    async def read_until(last: str) -> None:
        nonlocal audio
        async for event in session:
            seen.append(event.type)
            if event.type == "audio":
                audio += len(event.audio.data)
            if event.type == "error":
                raise AssertionError(event.error)
            raw = server_event(event)
            if raw is not None and raw["type"] == "error":
                raise AssertionError(raw)
            if raw is not None and raw["type"] == "session.updated":
                updates.append(raw["session"])
            if raw is not None and raw["type"].endswith("input_audio_transcription.completed"):
                transcripts.append(raw["transcript"])
            if last in (event.type, raw and raw["type"]):
                return

    async with session:
        await session.send_message("Hello there.")
        await asyncio.wait_for(read_until("audio_end"), TIMEOUT)
        assert audio > 0, seen
        assert "agent_start" in seen, seen
        # the session the SDK asked for, echoed as it asked
        audio_in = updates[-1]["audio"]["input"]
        assert audio_in["turn_detection"]["type"] == "semantic_vad"
        assert audio_in["turn_detection"]["eagerness"] == "auto"
        assert audio_in["transcription"]["model"] in OPENAI_NAMES["whisper-tiny.en"]
        # a spoken turn: semantic_vad ends it after the clip, the alias transcribes it
        speech = fox(24_000, tail_s=1.6).tobytes()
        for i in range(0, len(speech), 4800):
            await session.send_audio(speech[i : i + 4800])
        done = "conversation.item.input_audio_transcription.completed"
        await asyncio.wait_for(read_until(done), TIMEOUT)
    assert "lazy dog" in transcripts[-1].lower(), transcripts
