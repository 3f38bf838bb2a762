"""Barge-in while the tts worker speaks: the user's speech cancels the synthesis on
the worker, checked in the worker's own log, not by time.

The gateway here serves a tts entry whose sentences take long to speak: Soprano
with ``max_tokens: 300`` (19 s of audio per result: on the tiny model about 1.3 s
of CPU with OpenBLAS, 8.5 s with the reference BLAS, the decoder nearly all of it;
its language model alone takes a third of a second) and ``split_pattern: " "`` (one
result, one worker step, per word). The lm's answer is short, so when the user
speaks the lm is done and the response is only speaking: the worker is in the
middle of the sentence's synthesis, and the cancel it gets between two steps is
logged as ``speech rt-… cancelled after … s of audio``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from .gateway import Gateway, wait_until
from .test_realtime import (
    KEY,
    LM,
    append,
    cancelled_lines,
    fox,
    inflight,
    sdk,
    types,
    until,
    user_text,
    voice_models,
)

pytestmark = pytest.mark.slow

TTS = "tiny-tts-long"


@pytest.fixture(scope="module")
def gateway(
    tiny_en_path: Path,
    tiny_lm_path: Path,
    tiny_soprano_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Gateway]:
    models = voice_models(
        tiny_en_path,
        tiny_lm_path,
        tiny_soprano_path,
        tts_name=TTS,
        max_tokens=300,
        split_pattern=" ",
    )
    gw = Gateway(tmp_path_factory.mktemp("realtime-barge-in"), models, api_keys=[KEY])
    yield gw
    gw.stop()


def speaking_only(gateway: Gateway) -> bool:
    """The lm finished its turn and a synthesis is on the tts worker."""
    return inflight(gateway, LM) == 0 and inflight(gateway, TTS) == 1


async def test_barge_in_stops_the_tts_worker(gateway: Gateway) -> None:
    async with sdk(gateway).realtime.connect(model=LM) as conn:
        await until(conn, "session.created")
        await conn.session.update(
            session={
                "type": "realtime",
                "output_modalities": ["audio"],
                "max_output_tokens": 24,
                "audio": {"input": {"turn_detection": None}},
            }
        )
        await until(conn, "session.updated")
        await conn.conversation.item.create(item=user_text("Tell me a story."))
        await conn.response.create()
        await until(conn, "response.created")
        assert await asyncio.to_thread(wait_until, lambda: speaking_only(gateway), 120)
        assert not cancelled_lines(gateway, "speech")
        # the user speaks while the answer is being spoken (server VAD from now on)
        await conn.session.update(
            session={
                "type": "realtime",
                "audio": {
                    "input": {"turn_detection": {"type": "server_vad", "create_response": False}}
                },
            }
        )
        await append(conn, fox(24_000, lead_s=0.0).tobytes(), 4800)
        events = await until(conn, "response.done")
        assert "input_audio_buffer.speech_started" in types(events)
        done = events[-1].response
        assert done.status == "cancelled" and done.status_details.reason == "turn_detected"
        truncated = (await until(conn, "conversation.item.truncated"))[-1]
        assert truncated.item_id == done.output[0].id
    # the tts worker stopped the synthesis it was in the middle of, and nothing is left
    assert await asyncio.to_thread(wait_until, lambda: cancelled_lines(gateway, "speech"), 60)
    (line,) = cancelled_lines(gateway, "speech")
    assert "speech rt-" in line
    assert await asyncio.to_thread(wait_until, lambda: inflight(gateway, TTS) == 0, 30)
