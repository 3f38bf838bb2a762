"""The gateway's models as an MCP server, as an agent uses them: the official
``mcp`` client against the real ``mlx-gateway`` command serving a tiny model of
each kind (a language model, BERT embeddings, a cross-encoder, Whisper, Soprano,
FLUX.2 klein, also as an image-edit model). Each tool answers in its MCP content
type (pictures as image content, speech as audio content), a key scoped to one
model has that model's tools alone, and every call shows in ``/v1/usage``."""

from __future__ import annotations

import base64
import io
import json
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp_types import AudioContent, ImageContent, TextContent

from tests.fixtures.tiny_flux2 import CONFIG_NAME, MODEL_CONFIG
from tests.fixtures.whisper import FOX_CLIPS
from tests.supervisor.api.clients import mcp_client

from .gateway import Gateway

pytestmark = pytest.mark.slow

ADMIN, GUEST = "k-admin", "k-guest"
LM, EMB, CE, ASR, TTS, IMG, EDIT = "lm", "bert", "ce", "whisper", "tts", "flux", "flux-edit"
PNG = b"\x89PNG\r\n\x1a\n"
TOOLS = [
    "ask",
    "edit_image",
    "embed",
    "generate_image",
    "list_models",
    "load_model",
    "rerank",
    "speak",
    "transcribe",
    "unload_model",
]


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_lm_path: Path,
    tiny_bert_path: Path,
    tiny_cross_encoder_path: Path,
    tiny_whisper_path: Path,
    tiny_soprano_path: Path,
    tiny_flux2_path: Path,
) -> Iterator[Gateway]:
    flux = {"model_path": str(tiny_flux2_path), "model_config": MODEL_CONFIG, "size": "16x16"}
    models = [
        {"served_model_name": LM, "model_path": str(tiny_lm_path)},
        {"served_model_name": EMB, "model_path": str(tiny_bert_path), "model_type": "embeddings"},
        {
            "served_model_name": CE,
            "model_path": str(tiny_cross_encoder_path),
            "model_type": "rerank",
        },
        {"served_model_name": ASR, "model_path": str(tiny_whisper_path), "model_type": "whisper"},
        {
            "served_model_name": TTS,
            "model_path": str(tiny_soprano_path),
            "model_type": "tts",
            "generate_kwargs": {"max_tokens": 6},
        },
        {
            "served_model_name": IMG,
            "model_type": "image-generation",
            "config_name": CONFIG_NAME,
            **flux,
        },
        {
            "served_model_name": EDIT,
            "model_type": "image-edit",
            "config_name": "flux2-klein-edit-4b",
            **flux,
        },
    ]
    keys = [
        {"name": "admin", "key": ADMIN, "role": "admin"},
        {"name": "guest", "key": GUEST, "models": [TTS]},
    ]
    for model in models:
        model["on_demand"] = True  # started by the first call: two cores, seven models
    gw = Gateway(tmp_path_factory.mktemp("mcp"), models, keys=keys)
    yield gw
    gw.stop()


def connect(gateway: Any, key: str) -> Any:
    return mcp_client(f"{gateway.base_url}/mcp", key, timeout=300)


def only(result: Any, kind: type[Any]) -> Any:
    assert not result.is_error, result.content
    block = result.content[0]
    assert isinstance(block, kind), result.content
    return block


async def test_each_tool_answers_in_its_content_type(gateway: Gateway) -> None:
    async with connect(gateway, ADMIN) as client:
        listed = sorted(tool.name for tool in (await client.list_tools()).tools)
        assert listed == TOOLS

        picture = only(
            await client.call_tool("generate_image", {"prompt": "a red cat", "seed": 7}),
            ImageContent,
        )
        assert picture.mime_type == "image/png"
        png = base64.b64decode(picture.data)
        assert png.startswith(PNG)

        edited = await client.call_tool(
            "edit_image", {"prompt": "make it blue", "image": picture.data}
        )
        assert base64.b64decode(only(edited, ImageContent).data).startswith(PNG)

        speech = only(await client.call_tool("speak", {"text": "Hello there."}), AudioContent)
        assert speech.mime_type == "audio/wav"
        with wave.open(io.BytesIO(base64.b64decode(speech.data))) as wav:
            assert wav.getnframes() > 0

        clip = base64.b64encode(FOX_CLIPS[0].read_bytes()).decode("ascii")
        heard = only(
            await client.call_tool("transcribe", {"audio": clip, "language": "en"}), TextContent
        )
        assert heard.text  # the random Whisper always speaks (gibberish)

        vectors = json.loads(
            only(await client.call_tool("embed", {"texts": ["a", "b c"]}), TextContent).text
        )
        assert len(vectors) == 2 and len(vectors[0]) == len(vectors[1]) > 0

        ranked = await client.call_tool("rerank", {"query": "cats", "documents": ["cats", "tax"]})
        results = json.loads(only(ranked, TextContent).text)
        assert sorted(r["index"] for r in results) == [0, 1]
        assert {r["document"] for r in results} == {"cats", "tax"}

        answer = await client.call_tool("ask", {"prompt": "Say hi.", "max_tokens": 4})
        only(answer, TextContent)

    headers = {"Authorization": f"Bearer {ADMIN}"}
    usage = httpx.get(
        f"{gateway.base_url}/v1/usage", params={"group_by": "model,kind"}, headers=headers
    ).json()
    seen = {(row["model"], row["kind"]) for row in usage["data"]}
    expected = {
        (IMG, "images"),
        (EDIT, "images"),
        (TTS, "speech"),
        (ASR, "transcription"),
        (EMB, "embeddings"),
        (CE, "rerank"),
        (LM, "chat"),
    }
    assert expected <= seen, usage


async def test_a_key_scoped_to_one_model_has_its_tools_alone(gateway: Gateway) -> None:
    async with connect(gateway, GUEST) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert sorted(tools) == ["list_models", "speak"]
        assert "model" not in tools["speak"].input_schema.get("required", [])
        spoken = await client.call_tool("speak", {"text": "Just me."})
        only(spoken, AudioContent)
        models = json.loads(only(await client.call_tool("list_models", {}), TextContent).text)
    assert [m["id"] for m in models] == [TTS]
