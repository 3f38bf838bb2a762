"""Videos in ``/v1/chat/completions`` and ``/v1/responses`` end to end: the real app,
registry and relay, a real vlm worker process on the tiny random Qwen2-VL, the
official OpenAI SDK sending ``video_url`` parts as they are, and PyAV-made clips."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import pytest_asyncio
from starlette.applications import Starlette

from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.pool.spawn import worker_command
from tests.fixtures.image_server import ImageServer
from tests.fixtures.tiny_video import make_video

from ..fakes import fake_command

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

VL = "tiny-vl"  # fps 4, max_frames 8, max_video_seconds 3, reads files under clips/, loopback
SMALL = "tiny-vl-small"  # max_video_mb: 0.001; private addresses refused (the default)
TIGHT = "tiny-vl-tight"  # context_length: 40
LM = "lab/fake/ok"  # a fake language model: takes no videos


def command(spec: WorkerSpec, endpoint: str) -> list[str]:
    if spec.kind == "vlm":
        return worker_command(spec, endpoint)
    return fake_command(spec, endpoint)


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("clips")
    (folder / "four.mp4").write_bytes(make_video(4))
    return folder


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tiny_vlm_path: Path, clips: Path) -> AsyncIterator[Starlette]:
    vlm = {"model_path": str(tiny_vlm_path), "model_type": "vlm"}
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=1.0),
        models=[
            model_entry(
                **vlm,
                served_model_name=VL,
                fps=4,
                max_frames=8,
                max_video_seconds=3,
                local_video_dirs=[str(clips)],
                allow_private_image_urls=True,
            ),
            model_entry(**vlm, served_model_name=SMALL, max_video_mb=0.001),
            model_entry(**vlm, served_model_name=TIGHT, context_length=40, fps=4),
            model_entry(model_path=LM, served_model_name=LM),
        ],
    )
    app = create_app(config, command=command)
    async with app.router.lifespan_context(app):
        yield app


def data_url(data: bytes, media_type: str = "video/mp4") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def with_video(url: str, kind: str = "video_url") -> list[dict[str, Any]]:
    part: dict[str, Any] = {
        "type": kind,
        kind if kind != "input_video" else "video_url": {"url": url},
    }
    if kind == "video":
        part = {"type": "video", "video": url}
    return [{"role": "user", "content": [part, {"type": "text", "text": "describe this image"}]}]


async def prompt_tokens(sdk: openai.AsyncOpenAI, messages: list, model: str = VL) -> int:
    reply = await sdk.chat.completions.create(
        model=model, messages=messages, max_tokens=4, temperature=0
    )
    assert reply.usage is not None and reply.choices[0].message.content is not None
    return reply.usage.prompt_tokens


async def error_of(http: httpx.AsyncClient, messages: list, model: str = VL) -> tuple[int, dict]:
    body = {"model": model, "messages": messages, "max_tokens": 4}
    response = await http.post("/v1/chat/completions", json=body)
    return response.status_code, response.json()["error"]


async def test_prompt_tokens_grow_with_the_frames(sdk: openai.AsyncOpenAI) -> None:
    text = await prompt_tokens(sdk, [{"role": "user", "content": "describe this image"}])
    two, four, eight = [
        await prompt_tokens(sdk, with_video(data_url(make_video(n)))) for n in (2, 4, 8)
    ]
    # 56x56 frames: 4 tokens per two frames, between <|vision_start|> and <|vision_end|>.
    assert (two - text, four - text, eight - text) == (6, 10, 18)
    # 16 frames at 4 fps (4 s) exceed max_video_seconds; 12 frames (3 s) are sampled
    # evenly down to max_frames (8).
    assert await prompt_tokens(sdk, with_video(data_url(make_video(12)))) == eight


async def test_the_peers_part_names_and_a_local_file(sdk: openai.AsyncOpenAI, clips: Path) -> None:
    four = await prompt_tokens(sdk, with_video(data_url(make_video(4))))
    for kind in ("input_video", "video"):
        assert await prompt_tokens(sdk, with_video(data_url(make_video(4)), kind)) == four
    assert await prompt_tokens(sdk, with_video(str(clips / "four.mp4"))) == four
    assert await prompt_tokens(sdk, with_video(f"file://{clips}/four.mp4")) == four


async def test_an_http_url_under_the_image_fetch_rules(
    http: httpx.AsyncClient, sdk: openai.AsyncOpenAI
) -> None:
    four = await prompt_tokens(sdk, with_video(data_url(make_video(4))))
    with ImageServer() as server:
        server.files["/clip.mp4"] = make_video(4)
        assert await prompt_tokens(sdk, with_video(server.url("/clip.mp4"))) == four
        status, error = await error_of(http, with_video(server.url("/clip.mp4")), model=SMALL)
        assert (status, error["code"]) == (400, "image_url_refused")
        assert error["message"].startswith("The video URL ")
        status, error = await error_of(http, with_video(server.url("/gone.mp4")))
        assert (status, error["code"]) == (400, "image_url_unreachable")
        assert "HTTP 404" in error["message"]


async def test_responses_take_input_video(sdk: openai.AsyncOpenAI) -> None:
    chat = await prompt_tokens(sdk, with_video(data_url(make_video(4))))
    response = await sdk.responses.create(
        model=VL,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_video", "video_url": data_url(make_video(4))},  # type: ignore[list-item, misc]
                    {"type": "input_text", "text": "describe this image"},
                ],
            }
        ],
        max_output_tokens=4,
        temperature=0,
    )
    assert response.usage is not None and response.usage.input_tokens == chat


async def test_bad_and_oversized_videos_are_400s_and_the_worker_stays_up(
    http: httpx.AsyncClient, sdk: openai.AsyncOpenAI, app: Starlette, clips: Path
) -> None:
    await prompt_tokens(sdk, with_video(data_url(make_video(2))))
    handle = gateway_of(app).registry.resolve(VL)
    pid = handle.pid

    status, error = await error_of(http, with_video(data_url(b"no video in here")))
    assert (status, error["code"]) == (400, "invalid_video")
    assert error["message"].startswith(
        "The video in messages[0].content[0].video_url could not be decoded: "
    )
    assert error["param"] == "messages[0].content[0].video_url"

    status, error = await error_of(http, with_video(data_url(make_video(16))))
    assert (status, error["code"]) == (400, "video_too_long")
    assert "max_video_seconds (3 s)" in error["message"]

    status, error = await error_of(http, with_video(data_url(make_video(8))), model=SMALL)
    assert (status, error["code"]) == (400, "video_too_large")
    assert (
        "max_video_mb" in error["message"]
        and error["param"] == "messages[0].content[0].video_url.url"
    )

    clip = with_video(data_url(make_video(2)))
    three = [{"role": "user", "content": clip[0]["content"][:1] * 3}]
    status, error = await error_of(http, three)
    assert (status, error["code"]) == (400, "too_many_videos")
    assert error["param"] == "messages[0].content[2]" and "max_videos" in error["message"]

    status, error = await error_of(http, with_video(data_url(b"x", "image/png")))
    assert (status, error["code"]) == (400, "invalid_video_url")

    status, error = await error_of(http, with_video("/etc/passwd"))
    assert (status, error["code"]) == (400, "video_path_refused")
    assert "local_video_dirs" in error["message"]
    status, error = await error_of(http, with_video(str(clips / "four.mp4")), model=SMALL)
    assert (status, error["code"]) == (400, "video_path_refused")

    assert handle.pid == pid and handle.status().state == "ready"
    assert await prompt_tokens(sdk, with_video(data_url(make_video(2)))) > 0


async def test_videos_need_a_vision_model(http: httpx.AsyncClient, app: Starlette) -> None:
    status, error = await error_of(http, with_video(data_url(make_video(2))), model=LM)
    assert (status, error["code"]) == (400, "videos_not_supported")
    assert error["param"] == "messages[0].content[0]" and f"'{LM}'" in error["message"]
    assert gateway_of(app).registry.resolve(LM).status().state == "unloaded"


async def test_the_frames_count_before_the_turn_and_in_the_context_check(
    http: httpx.AsyncClient, sdk: openai.AsyncOpenAI
) -> None:
    messages = with_video(data_url(make_video(8)))
    body = {"model": VL, "messages": messages}
    counted = await http.post("/v1/chat/completions/input_tokens", json=body)
    assert counted.status_code == 200
    assert counted.json()["input_tokens"] == await prompt_tokens(sdk, messages)

    # 2 frames fit a 40-token context, 8 frames (42 prompt tokens) do not.
    assert await prompt_tokens(sdk, with_video(data_url(make_video(2))), model=TIGHT) < 40
    status, error = await error_of(http, messages, model=TIGHT)
    assert (status, error["code"]) == (400, "context_length_exceeded")
    assert "42" in error["message"]
