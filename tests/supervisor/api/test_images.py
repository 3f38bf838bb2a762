"""The image endpoints end to end: the real app, registry and relay, a real image
worker process (mflux) on the tiny random FLUX.2 klein, and the official openai SDK.
Each picture is 16x16 and costs a few seconds of CPU (the VAE), so the tests here
make few of them; request checks that need no worker run first and start none."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import pytest_asyncio
from PIL import Image
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.gateway import gateway_of
from tests.fixtures.tiny_flux2 import CONFIG_NAME, MODEL_CONFIG

# One gateway (and so one image worker) for the whole module.
pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

FLUX = "tiny-flux"
EDIT = "tiny-flux-edit"  # uploads of at most 0.01 MiB
TTL = 1.5


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tiny_flux2_path: Path) -> AsyncIterator[Starlette]:
    tiny = {
        "model_path": str(tiny_flux2_path),
        "config_name": CONFIG_NAME,
        "model_config": MODEL_CONFIG,
        "steps": 2,
        "size": "16x16",
        "max_output_pixels": 64 * 64,
        "idle_timeout": 0,
    }
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=1.0, image_url_ttl=TTL),
        models=[
            model_entry(served_model_name=FLUX, model_type="image-generation", **tiny),
            # named as mlx-openai-server names the edit preset of the same weights
            model_entry(
                served_model_name=EDIT,
                model_type="image-edit",
                max_image_mb=0.01,
                **{**tiny, "config_name": "flux2-klein-edit-4b"},
            ),
            model_entry(model_path="org/some-chat-model", served_model_name="chat"),
        ],
    )
    app = create_app(config)
    async with app.router.lifespan_context(app):
        yield app


def state(app: Starlette, name: str = FLUX) -> str:
    return str(gateway_of(app).registry.resolve(name).status().state)


def decode(b64: str) -> Image.Image:
    picture = Image.open(io.BytesIO(base64.b64decode(b64)))
    picture.load()
    return picture


def sse_blocks(body: bytes) -> tuple[list[str], list[Any]]:
    """The comment lines and the decoded data events (``[DONE]`` as the string)."""
    comments: list[str] = []
    data: list[Any] = []
    for block in body.decode().split("\n\n")[:-1]:
        if block.startswith(":"):
            comments.append(block)
        else:
            assert block.startswith("data: "), block
            payload = block.removeprefix("data: ")
            data.append(payload if payload == "[DONE]" else json.loads(payload))
    return comments, data


def png_bytes(size: tuple[int, int]) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, (10, 120, 200)).save(buffer, format="PNG")
    return buffer.getvalue()


# ---------------------------------------------------------------- checked in the gateway


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"size": "100x100"}, "size"),
        ({"size": "big"}, "size"),
        ({"size": "128x128"}, "size"),  # over max_output_pixels (64 * 64)
        ({"n": 11}, "n"),
        ({"seed": -1}, "seed"),
        ({"steps": 0}, "steps"),
        ({"response_format": "gif"}, "response_format"),
        ({"background": "transparent"}, "background"),
        ({"stream": True, "response_format": "url"}, "response_format"),
        ({"prompt": " "}, "prompt"),
        ({"model": "chat"}, "model"),  # a chat model on the images endpoint
        ({"model": EDIT}, "model"),  # an edit model without an image
    ],
)
async def test_bad_requests_are_400_before_any_worker(
    http: httpx.AsyncClient, app: Starlette, body: dict[str, Any], param: str
) -> None:
    r = await http.post("/v1/images/generations", json={"model": FLUX, "prompt": "a cat", **body})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param
    assert error["type"] == "invalid_request_error"
    assert state(app) == "unloaded"


async def test_bad_size_names_size_in_the_sdk_error(sdk: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        await sdk.images.generate(model=FLUX, prompt="a cat", size="1000x1000")  # type: ignore[arg-type]
    assert "size" in str(info.value)
    assert "multiples of 16" in str(info.value)


async def test_edit_form_checks(http: httpx.AsyncClient, app: Starlette) -> None:
    form = {"model": EDIT, "prompt": "make it red"}
    no_image = await http.post("/v1/images/edits", data=form, files={"other": ("x.png", b"x")})
    assert no_image.status_code == 400
    big = await http.post(
        "/v1/images/edits", data=form, files={"image": ("big.png", b"\0" * 20_000)}
    )
    assert big.status_code == 413
    assert big.json()["error"]["code"] == "file_too_large"
    wrong_model = await http.post(
        "/v1/images/edits", data={**form, "model": FLUX}, files={"image": ("a.png", b"x")}
    )
    assert wrong_model.status_code == 400
    assert wrong_model.json()["error"]["param"] == "model"
    json_body = await http.post("/v1/images/edits", json=form)
    assert json_body.status_code == 400
    assert state(app, EDIT) == "unloaded"


# ---------------------------------------------------------------- with the worker


async def test_b64_pictures_decode_at_the_requested_size(
    sdk: openai.AsyncOpenAI, app: Starlette
) -> None:
    result = await sdk.images.generate(
        model=FLUX, prompt="a red cat", n=2, size="16x16", extra_body={"seed": 11}
    )
    assert isinstance(result.created, int) and result.created > 0
    assert result.size == "16x16" and result.output_format == "png"
    assert result.data is not None and len(result.data) == 2
    pictures = [decode(item.b64_json or "") for item in result.data]
    assert all(p.format == "PNG" and p.size == (16, 16) for p in pictures)
    assert pictures[0].tobytes() != pictures[1].tobytes()
    assert [item.model_extra for item in result.data] == [{"seed": 11}, {"seed": 12}]
    assert state(app) == "ready"
    assert gateway_of(app).registry.resolve(FLUX).status().inflight == 0


async def test_url_format_serves_the_file_until_it_expires(
    http: httpx.AsyncClient, app: Starlette
) -> None:
    body = {"model": FLUX, "prompt": "a red cat", "response_format": "url", "seed": 11}
    r = await http.post("/v1/images/generations", json=body)
    assert r.status_code == 200, r.text
    (item,) = r.json()["data"]
    url = item["url"]
    assert url.startswith("http://gw/v1/images/files/") and url.endswith(".png")
    assert "b64_json" not in item
    got = await http.get(url)
    assert got.status_code == 200
    assert got.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(got.content)).size == (16, 16)
    assert (await http.get(url.replace(".png", ".jpeg"))).status_code == 404
    await asyncio.sleep(TTL + 0.2)  # not a wait: past the TTL under test
    gone = await http.get(url)
    assert gone.status_code == 404
    assert gone.json()["error"]["code"] == "image_not_found"


async def test_stream_sends_partial_and_completed_events(
    http: httpx.AsyncClient, app: Starlette
) -> None:
    body = {
        "model": FLUX,
        "prompt": "a red cat",
        "stream": True,
        "partial_images": 1,
        "output_format": "jpeg",
        "seed": 11,
    }
    r = await http.post("/v1/images/generations", json=body)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    comments, data = sse_blocks(r.content)
    assert comments == [": image 1/1 step 1/2", ": image 1/1 step 2/2"]
    assert data[-1] == "[DONE]"
    partial, completed = data[:-1]
    assert partial["type"] == "image_generation.partial_image"
    assert partial["partial_image_index"] == 0
    assert completed["type"] == "image_generation.completed"
    assert completed["size"] == "16x16" and completed["output_format"] == "jpeg"
    assert decode(completed["b64_json"]).format == "JPEG"
    assert decode(partial["b64_json"]).size == (16, 16)


async def test_progress_shows_in_models_while_a_picture_is_made(
    http: httpx.AsyncClient, app: Starlette
) -> None:
    body = {"model": FLUX, "prompt": "a red cat", "steps": 3, "seed": 11}
    request = asyncio.create_task(http.post("/v1/images/generations", json=body))
    seen: list[dict[str, Any]] = []
    while not request.done():
        entry = (await http.get(f"/v1/models/{FLUX}")).json()
        seen += [p for p in entry["progress"] if p["step"]]
        await asyncio.sleep(0.05)
    assert (await request).status_code == 200
    assert seen and seen[-1]["steps"] == 3 and seen[-1]["images"] == 1
    assert (await http.get(f"/v1/models/{FLUX}")).json()["progress"] == []


async def test_edit_sends_the_upload_to_the_worker(sdk: openai.AsyncOpenAI, app: Starlette) -> None:
    result = await sdk.images.edit(
        model=EDIT,
        image=("in.png", png_bytes((20, 20)), "image/png"),
        prompt="make it red",
        extra_body={"seed": 5},
    )
    assert result.data is not None
    (item,) = result.data
    # No size asked: the input's, snapped down to a multiple of 16.
    assert decode(item.b64_json or "").size == (16, 16)
    assert result.size == "16x16"
    assert state(app, EDIT) == "ready"
