"""The Agents SDK's ``RealtimeAgent`` (openai-agents), unmodified, against
``/v1/realtime``: its model pointed at the gateway by ``model_config``'s ``url``
and ``api_key``; a text turn is answered with the agent's transcript and audio
from the real workers (the tiny lm, the tiny Soprano). The runner's config names
``server_vad`` and the whisper entry (its defaults, ``semantic_vad`` and
``gpt-4o-mini-transcribe``, are refused with error events)."""

from __future__ import annotations

import asyncio

import pytest
from agents.realtime import RealtimeAgent, RealtimeRunner

from .gateway import Gateway
from .test_realtime import ASR, KEY, LM, gateway  # noqa: F401  (the module's gateway fixture)

pytestmark = pytest.mark.slow


async def test_realtime_agent_answers_through_the_gateway(gateway: Gateway) -> None:  # noqa: F811
    agent = RealtimeAgent(name="Assistant", instructions="Answer briefly.")
    # the SDK's defaults name OpenAI's: semantic_vad (refused here) and
    # gpt-4o-mini-transcribe (not served): the local ones instead
    settings = {
        "turn_detection": {"type": "server_vad"},
        "input_audio_transcription": {"model": ASR},
    }
    runner = RealtimeRunner(agent, config={"model_settings": settings})
    url = f"ws://127.0.0.1:{gateway.port}/v1/realtime?model={LM}"
    session = await runner.run(model_config={"url": url, "api_key": KEY})
    seen: list[str] = []
    audio = 0
    async with session:
        await session.send_message("Hello there.")

        async def read() -> None:
            nonlocal audio
            async for event in session:
                seen.append(event.type)
                if event.type == "audio":
                    audio += len(event.audio.data)
                if event.type == "error":
                    raise AssertionError(event.error)
                if event.type == "raw_model_event" and event.data.type == "error":
                    raise AssertionError(event.data.error)
                if event.type == "audio_end":
                    return

        await asyncio.wait_for(read(), 180)
    assert audio > 0, seen
    assert "agent_start" in seen, seen
