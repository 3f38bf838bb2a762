"""The audio endpoints end to end: the real app, registry and relay, a real whisper
worker process on the tiny random Whisper, and the official openai SDK (strict
response validation). The random model's words are gibberish, so these tests check
shapes, formats and errors; tests/e2e/test_speech.py checks real words."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import pytest_asyncio
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.gateway import gateway_of
from tests.fixtures.whisper import FOX_CLIPS

# One gateway (and so one worker process) for the whole module.
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

WHISPER = "whisper-tiny"
SMALL = "whisper-small-uploads"  # the same model with a 0.005 MiB upload limit
OGG, MP3 = FOX_CLIPS


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tiny_whisper_path: Path) -> AsyncIterator[Starlette]:
    model = {"model_path": str(tiny_whisper_path), "model_type": "whisper", "idle_timeout": 0}
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=1.0),
        models=[
            model_entry(served_model_name=WHISPER, **model),
            model_entry(served_model_name=SMALL, max_upload_mb=0.005, **model),
            # Never started: requests naming it are refused before any worker runs.
            model_entry(model_path="org/some-chat-model", served_model_name="chat"),
        ],
    )
    app = create_app(config)
    async with app.router.lifespan_context(app):
        yield app


def status(app: Starlette, name: str = WHISPER) -> dict[str, Any]:
    return gateway_of(app).registry.resolve(name).status().public()


# A fixed temperature: one decode per window (0 lets the random model retry six times).
FAST = {"temperature": 0.5}


async def test_json_and_text(sdk: openai.AsyncOpenAI, app: Starlette) -> None:
    result = await sdk.audio.transcriptions.create(model=WHISPER, file=OGG.open("rb"), **FAST)
    assert result.text and result.text == result.text.strip()
    assert result.usage is not None and result.usage.type == "duration"
    assert result.usage.seconds == 3  # 2.78 s, rounded up
    text = await sdk.audio.transcriptions.create(
        model=WHISPER, file=MP3.open("rb"), response_format="text", **FAST
    )
    assert isinstance(text, str) and text.endswith("\n")
    assert status(app)["inflight"] == 0


async def test_verbose_json_with_words(sdk: openai.AsyncOpenAI) -> None:
    result = await sdk.audio.transcriptions.create(
        model=WHISPER,
        file=OGG.open("rb"),
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
        **FAST,
    )
    assert result.language == "english"
    assert result.duration == pytest.approx(2.78, abs=0.01)
    assert result.segments and result.words
    assert [s.id for s in result.segments] == list(range(len(result.segments)))
    assert all(0 <= w.start <= w.end <= 30 for w in result.words)
    assert all(w.word == w.word.strip() and w.word for w in result.words)
    words_only = await sdk.audio.transcriptions.create(
        model=WHISPER,
        file=OGG.open("rb"),
        response_format="verbose_json",
        timestamp_granularities=["word"],
        **FAST,
    )
    assert words_only.segments is None and words_only.words
    plain = await sdk.audio.transcriptions.create(
        model=WHISPER, file=OGG.open("rb"), response_format="verbose_json", **FAST
    )
    assert plain.segments and plain.words is None


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
async def test_subtitles(http: httpx.AsyncClient, fmt: str) -> None:
    r = await http.post(
        "/v1/audio/transcriptions",
        data={"model": WHISPER, "response_format": fmt, "temperature": "0.5"},
        files={"file": ("fox.ogg", OGG.read_bytes(), "audio/ogg")},
    )
    assert r.status_code == 200, r.text
    stamp = r"\d\d:\d\d:\d\d[.,]\d\d\d --> \d\d:\d\d:\d\d[.,]\d\d\d"
    if fmt == "srt":
        assert r.headers["content-type"].startswith("text/plain")
        assert re.match(rf"1\n{stamp}\n\S", r.text)
        assert "," in r.text.splitlines()[1]
    else:
        assert r.headers["content-type"].startswith("text/vtt")
        assert re.match(rf"WEBVTT\n\n{stamp}\n\S", r.text)


async def test_stream_events(sdk: openai.AsyncOpenAI, http: httpx.AsyncClient) -> None:
    stream = await sdk.audio.transcriptions.create(
        model=WHISPER, file=OGG.open("rb"), stream=True, **FAST
    )
    events = [event async for event in stream]
    assert [e.type for e in events[:-1]] == ["transcript.text.delta"] * (len(events) - 1)
    assert events[-1].type == "transcript.text.done"
    assert "".join(e.delta for e in events[:-1]).strip() == events[-1].text  # type: ignore[union-attr]

    r = await http.post(
        "/v1/audio/transcriptions",
        data={"model": WHISPER, "stream": "true", "temperature": "0.5"},
        files={"file": ("fox.mp3", MP3.read_bytes())},
    )
    assert r.headers["content-type"].startswith("text/event-stream")
    lines = [line[6:] for line in r.text.split("\n\n") if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    assert json.loads(lines[-2])["type"] == "transcript.text.done"


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # the SDK's marker
async def test_translation(sdk: openai.AsyncOpenAI) -> None:
    result = await sdk.audio.translations.create(model=WHISPER, file=MP3.open("rb"), **FAST)
    assert result.text
    verbose = await sdk.audio.translations.create(
        model=WHISPER, file=MP3.open("rb"), response_format="verbose_json", **FAST
    )
    assert verbose.language == "english" and verbose.segments


# ---------------------------------------------------------------- errors


async def post(http: httpx.AsyncClient, data: dict[str, str], files: Any = None) -> httpx.Response:
    if files is None:
        files = {"file": ("fox.ogg", OGG.read_bytes(), "audio/ogg")}
    return await http.post("/v1/audio/transcriptions", data=data, files=files)


@pytest.mark.parametrize(
    ("data", "files", "param"),
    [
        ({"model": WHISPER}, {}, "file"),
        ({"model": WHISPER}, {"audio": ("a.ogg", b"x")}, "file"),
        ({"model": WHISPER}, {"file": ("empty.ogg", b"")}, "file"),
        ({}, None, "model"),
        ({"model": WHISPER, "temperature": "hot"}, None, "temperature"),
        ({"model": WHISPER, "temperature": "1.5"}, None, "temperature"),
        ({"model": WHISPER, "response_format": "xml"}, None, "response_format"),
        ({"model": WHISPER, "timestamp_granularities[]": "word"}, None, "timestamp_granularities"),
        ({"model": WHISPER, "stream": "true", "response_format": "srt"}, None, "stream"),
        ({"model": "chat"}, None, "model"),
    ],
)
async def test_bad_forms_are_400_before_any_worker_starts(
    http: httpx.AsyncClient, app: Starlette, data: dict[str, str], files: Any, param: str
) -> None:
    if files == {}:  # httpx sends a form without files urlencoded: write it by hand
        body = f'--b\r\nContent-Disposition: form-data; name="model"\r\n\r\n{WHISPER}\r\n--b--\r\n'
        r = await http.post(
            "/v1/audio/transcriptions",
            content=body.encode(),
            headers={"content-type": "multipart/form-data; boundary=b"},
        )
    else:
        r = await post(http, data, files)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert status(app, "chat")["state"] == "unloaded"


async def test_not_multipart_is_400(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/audio/transcriptions", json={"model": WHISPER})
    assert r.status_code == 400
    assert "multipart/form-data" in r.json()["error"]["message"]


async def test_unknown_model_is_404(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        await sdk.audio.transcriptions.create(model="whisper-1", file=OGG.open("rb"))
    assert WHISPER in str(info.value)


async def test_uploads_over_the_limit_are_413(http: httpx.AsyncClient, app: Starlette) -> None:
    # Over the model's own limit (0.005 MiB, the clip has 7.4 KiB): read, then refused.
    r = await post(http, {"model": SMALL})
    assert r.status_code == 413
    assert r.json()["error"]["param"] == "file"
    assert "0.005 MiB" in r.json()["error"]["message"]
    assert status(app, SMALL)["state"] == "unloaded"

    # Over every model's limit (100 MiB): refused from Content-Length, body unread.
    declared = await http.post(
        "/v1/audio/transcriptions",
        content=b"--b--\r\n",
        headers={
            "content-type": "multipart/form-data; boundary=b",
            "content-length": str(200 * 1024 * 1024),
        },
    )
    assert declared.status_code == 413

    # No Content-Length (a chunked body): counted while it arrives, cut at the limit.
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n'
        for _ in range(120):
            sent += 1
            yield b"\0" * (1024 * 1024)

    streamed = await http.post(
        "/v1/audio/transcriptions",
        content=chunks(),
        headers={"content-type": "multipart/form-data; boundary=b"},
    )
    assert streamed.status_code == 413
    assert sent <= 101


async def test_undecodable_audio_is_400_with_the_reason(
    sdk: openai.AsyncOpenAI, http: httpx.AsyncClient, app: Starlette
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.audio.transcriptions.create(
            model=WHISPER, file=("notes.txt", b"these are not sounds " * 20)
        )
    assert info.value.body["param"] == "file"  # type: ignore[index]
    assert "Invalid data found" in info.value.body["message"]  # type: ignore[index]
    # Streamed or not, the error comes before any event.
    r = await post(
        http, {"model": WHISPER, "stream": "true"}, {"file": ("a.mp3", b"\xff\xfb" + b"\0" * 64)}
    )
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    assert status(app)["state"] == "ready"  # the worker lives on
