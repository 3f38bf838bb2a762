"""Early transcription (``realtime.early_transcription``): with server_vad a turn's
transcription starts at the first silence after its speech, before the turn is
committed; speech that goes on drops it and the whisper worker's request is
cancelled. Checked by the order of the gateway's and the worker's log lines and of
the session's events, not by time, against a gateway serving Whisper tiny.en, with
the official ``openai`` SDK's realtime client.

The session hears two turns sent as one stream: the fox clip, then (after more
than ``silence_duration_ms`` of silence) the clip twice with a short pause between.
The first turn's transcription keeps the worker busy (one window, seconds on a
CPU) while the second turn's early transcription of its first half arrives there,
so the cancel that the pause's end sends finds that request still on the worker.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .gateway import Gateway, wait_until
from .test_realtime import ASR, KEY, append, fox, inflight, sdk, types, until

pytestmark = pytest.mark.slow

SILENCE_MS = 1000
"""Longer than the pause inside the second turn (250 ms, about 500 ms of silence
for the VAD with the clip's own edges), shorter than the gap between the turns."""


def whisper_only(asr: Path) -> list[dict[str, Any]]:
    return [{"served_model_name": ASR, "model_path": str(asr), "model_type": "whisper"}]


@pytest.fixture(scope="module")
def gateway(tiny_en_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = Gateway(tmp_path_factory.mktemp("early"), whisper_only(tiny_en_path), api_keys=[KEY])
    yield gw
    gw.stop()


@pytest.fixture(scope="module")
def late_gateway(tiny_en_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = Gateway(
        tmp_path_factory.mktemp("late"),
        whisper_only(tiny_en_path),
        api_keys=[KEY],
        realtime={"early_transcription": False},
    )
    yield gw
    gw.stop()


def early_lines(gateway: Gateway) -> list[str]:
    """The gateway's early transcription lines and the worker's cancels, in order."""
    keep = ("transcribed early", "started early", "early transcription", "transcription rt-")
    return [line for line in gateway.log().splitlines() if any(k in line for k in keep)]


async def two_turns(gateway: Gateway, wait_for_early: bool) -> list[Any]:
    """The two turns' events, up to the second ``…completed``."""
    first = fox(24_000, lead_s=0.6, tail_s=1.6).tobytes()
    half = fox(24_000, lead_s=0.0, tail_s=0.25).tobytes()
    rest = fox(24_000, lead_s=0.0, tail_s=1.6).tobytes()
    async with sdk(gateway).realtime.connect(extra_query={"intent": "transcription"}) as conn:
        await until(conn, "session.created")
        vad = {"type": "server_vad", "silence_duration_ms": SILENCE_MS}
        await conn.session.update(
            session={
                "type": "transcription",
                "audio": {
                    "input": {
                        "format": {"type": "audio/pcm", "rate": 24000},
                        "transcription": {"model": ASR, "language": "en"},
                        "turn_detection": vad,
                    }
                },
            }
        )
        events = await until(conn, "session.updated")
        await append(conn, first + half, 4800)
        if wait_for_early:
            # the second turn's pause started a transcription of its first half, which
            # went to the worker behind the first turn's
            def sent() -> bool:
                return len(re.findall("transcribed early", gateway.log())) >= 2 and (
                    inflight(gateway, ASR) >= 2
                )

            assert await asyncio.to_thread(wait_until, sent, 60), early_lines(gateway)
        await append(conn, rest, 4800)
        events += await until(conn, "conversation.item.input_audio_transcription.completed")
        events += await until(conn, "conversation.item.input_audio_transcription.completed")
    return events


def transcripts(events: list[Any]) -> list[str]:
    done = "conversation.item.input_audio_transcription.completed"
    return [e.transcript for e in events if e.type == done]


async def test_a_pause_inside_a_turn_cancels_its_early_transcription(
    gateway: Gateway, late_gateway: Gateway
) -> None:
    events = await two_turns(gateway, wait_for_early=True)
    kinds = types(events)
    assert kinds.count("input_audio_buffer.committed") == 2, kinds
    committed = [e.item_id for e in events if e.type == "input_audio_buffer.committed"]
    assert [e.item_id for e in events if e.type.endswith("transcription.completed")] == committed
    one, two = transcripts(events)
    assert "lazy dog" in one.lower()
    assert two.lower().count("the quick") == 2, two  # one transcript of the whole turn
    # the same transcripts as a gateway that starts each transcription at the commit
    late = await two_turns(late_gateway, wait_for_early=False)
    assert transcripts(late) == [one, two]
    assert not early_lines(late_gateway)

    lines = early_lines(gateway)
    started = [re.search(r"item (\S+) transcribed early \((rt-\w+)", x) for x in lines]
    early = [(m.group(1), m.group(2)) for m in started if m]
    # the first turn's pause, the second turn's inner pause, then its end
    assert [item for item, _ in early] == [committed[0], committed[1], committed[1]], lines
    (_, kept_one), (_, dropped), (_, kept_two) = early
    # each committed turn adopted the transcription started before its commit ...
    for item, request in ((committed[0], kept_one), (committed[1], kept_two)):
        adopted = f"item {item} committed, its transcription {request} started early"
        at = next(i for i, x in enumerate(lines) if adopted in x)
        assert at > next(i for i, x in enumerate(lines) if f"early ({request}" in x)
    # ... and the one the speech went on after was cancelled on the worker
    assert any(f"early transcription {dropped} dropped (the speech went on)" in x for x in lines)
    assert await asyncio.to_thread(
        wait_until, lambda: f"transcription {dropped} cancelled" in gateway.log(), 60
    ), early_lines(gateway)
    assert not any(f"transcription {r} cancelled" in gateway.log() for r in (kept_one, kept_two))
    assert await asyncio.to_thread(wait_until, lambda: inflight(gateway, ASR) == 0, 60)
