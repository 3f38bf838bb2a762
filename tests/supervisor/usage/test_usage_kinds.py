"""Usage rows of the other kinds, from real workers on tiny random models (a
language model, BERT embeddings, a cross-encoder, Whisper, Soprano, FLUX.2): each
row holds what its client was told (tokens, seconds of audio heard or received,
pictures), and a repeated prompt's cached tokens are those the client saw."""

from __future__ import annotations

import io
import math
import wave
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
from tests.fixtures.tiny_flux2 import CONFIG_NAME, MODEL_CONFIG
from tests.fixtures.whisper import FOX_CLIPS

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

LM, BERT, CE, ASR, TTS = "tiny-lm", "tiny-bert", "tiny-ce", "tiny-whisper", "tiny-tts"
FLUX = "tiny-flux"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_lm_path: Path,
    tiny_bert_path: Path,
    tiny_cross_encoder_path: Path,
    tiny_whisper_path: Path,
    tiny_soprano_path: Path,
    tiny_flux2_path: Path,
) -> AsyncIterator[Starlette]:
    path = tmp_path_factory.mktemp("usage") / "usage.sqlite3"
    entries: list[dict[str, Any]] = [
        {"served_model_name": LM, "model_path": str(tiny_lm_path)},
        {"served_model_name": BERT, "model_path": str(tiny_bert_path), "model_type": "embeddings"},
        {
            "served_model_name": CE,
            "model_path": str(tiny_cross_encoder_path),
            "model_type": "rerank",
        },
        {"served_model_name": ASR, "model_path": str(tiny_whisper_path), "model_type": "whisper"},
        {"served_model_name": TTS, "model_path": str(tiny_soprano_path), "model_type": "tts"},
        {
            "served_model_name": FLUX,
            "model_path": str(tiny_flux2_path),
            "model_type": "image-generation",
            "config_name": CONFIG_NAME,
            "model_config": MODEL_CONFIG,
            "steps": 2,
            "size": "16x16",
        },
    ]
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=1.0, usage_path=str(path)),
        models=[model_entry(**entry) for entry in entries],
    )
    app = create_app(config)
    async with app.router.lifespan_context(app):
        yield app


@pytest_asyncio.fixture(loop_scope="module")
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=300) as c:
        yield c


async def rows(http: httpx.AsyncClient, kind: str) -> dict[str, Any]:
    reply = await http.get("/v1/usage", params={"kind": kind})
    (row,) = reply.json()["data"]
    assert row["errors"] == 0
    return dict(row)


async def test_each_kind_counts_what_its_client_was_told(http: httpx.AsyncClient) -> None:
    sdk = openai.AsyncOpenAI(base_url="http://gw/v1", api_key="-", http_client=http)
    prompt = [{"role": "user", "content": "tell me a long story about the sea " * 8}]
    told = []
    for _ in range(2):  # the second one reads the first one's prompt from the cache
        chat = await sdk.chat.completions.create(model=LM, messages=prompt, max_tokens=4)  # type: ignore[arg-type]
        assert chat.usage is not None and chat.usage.prompt_tokens_details is not None
        told.append(chat.usage)
    row = await rows(http, "chat")
    assert row["input_tokens"] == sum(u.prompt_tokens for u in told)
    assert row["output_tokens"] == sum(u.completion_tokens for u in told)
    cached = sum((u.prompt_tokens_details.cached_tokens or 0) for u in told)  # type: ignore[union-attr]
    assert row["cached_tokens"] == cached and cached > 0

    vectors = await sdk.embeddings.create(model=BERT, input=["a man is eating", "hello"])
    row = await rows(http, "embeddings")
    assert (row["requests"], row["input_tokens"]) == (1, vectors.usage.prompt_tokens)

    ranked = (
        await http.post("/v1/rerank", json={"model": CE, "query": "q", "documents": ["a", "b"]})
    ).json()
    row = await rows(http, "rerank")
    assert row["input_tokens"] == ranked["usage"]["prompt_tokens"] > 0

    with FOX_CLIPS[0].open("rb") as clip:
        heard = await sdk.audio.transcriptions.create(model=ASR, file=clip, temperature=0.5)
    row = await rows(http, "transcription")
    assert heard.usage is not None and heard.usage.type == "duration"
    assert math.ceil(row["audio_seconds"]) == heard.usage.seconds and row["audio_seconds"] > 2

    spoken = await sdk.audio.speech.create(
        model=TTS, voice="alloy", input="Hello there.", response_format="wav"
    )
    with wave.open(io.BytesIO(spoken.content)) as sound:  # streamed: no length in it
        frame = sound.getnchannels() * sound.getsampwidth()
        seconds = (len(spoken.content) - 44) / frame / sound.getframerate()
    row = await rows(http, "speech")
    assert row["audio_seconds"] == pytest.approx(seconds, abs=0.01) and seconds > 0

    pictures = await sdk.images.generate(model=FLUX, prompt="a red square", n=2)
    assert pictures.data is not None
    row = await rows(http, "images")
    assert (row["requests"], row["images"]) == (1, len(pictures.data)) == (1, 2)
