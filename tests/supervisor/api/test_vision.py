"""Images in ``/v1/chat/completions`` end to end: the real app, registry and relay,
a real vlm worker process on the tiny random Qwen2-VL, the official OpenAI SDK, and
image URLs served by a real local HTTP server."""

from __future__ import annotations

import base64
import io
import random
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import pytest_asyncio
from PIL import Image
from pillow_heif import register_heif_opener
from starlette.applications import Starlette

from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.pool.spawn import worker_command
from tests.fixtures.image_server import ImageServer

from ..fakes import fake_command

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
register_heif_opener()  # to encode the HEIC test file

VL = "tiny-vl"  # may fetch from loopback (the test server)
STRICT = "tiny-vl-strict"  # the default: private addresses refused
SMALL = "tiny-vl-small"  # max_image_mb: 0.01
LM = "lab/fake/ok"  # a fake language model: takes no images
OMNI = "tiny-omni"  # a Gemma 4 with an audio encoder
FORMATS: list[tuple[str, dict[str, Any]]] = [
    ("PNG", {}),
    ("JPEG", {"quality": 90}),
    ("WEBP", {"lossless": True}),
    ("GIF", {}),
    ("BMP", {}),
    ("TIFF", {}),
    ("HEIF", {"quality": 90}),  # an iPhone photo's format (pillow-heif encodes it)
    ("AVIF", {"quality": 90}),
]
LOSSY = ("JPEG", "HEIF", "AVIF")


def command(spec: WorkerSpec, endpoint: str) -> list[str]:
    """The real worker for vision models, the fake one for the language model."""
    if spec.kind == "vlm":
        return worker_command(spec, endpoint)
    return fake_command(spec, endpoint)


def picture(size: tuple[int, int] = (56, 56), color: tuple[int, int, int] = (255, 0, 0)) -> bytes:
    image = Image.new("RGB", size, color)
    for x in range(0, size[0], 7):
        image.putpixel((x, x % size[1]), (0, 0, 0))
    return encode(image)


def encode(image: Image.Image, fmt: str = "PNG", **options: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def with_images(*urls: str, text: str = "describe this image", detail: str = "auto") -> list:
    parts: list[dict[str, Any]] = [
        {"type": "image_url", "image_url": {"url": url, "detail": detail}} for url in urls
    ]
    parts.append({"type": "text", "text": text})
    return [{"role": "user", "content": parts}]


@pytest.fixture(scope="module")
def images() -> Iterator[ImageServer]:
    with ImageServer() as server:
        base = Image.open(io.BytesIO(picture((84, 56))))
        for fmt, options in FORMATS:
            server.files[f"/pic.{fmt.lower()}"] = encode(base, fmt, **options)
        noise = random.Random(0).randbytes(120 * 120 * 3)
        server.files["/big.png"] = encode(Image.frombytes("RGB", (120, 120), noise))
        server.files["/wide.png"] = picture((2048, 256))
        yield server


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tiny_vlm_path: Path, tiny_omni_path: Path) -> AsyncIterator[Starlette]:
    vlm = {"model_path": str(tiny_vlm_path), "model_type": "vlm"}
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=1.0),
        models=[
            model_entry(**vlm, served_model_name=VL, allow_private_image_urls=True, max_images=3),
            model_entry(**vlm, served_model_name=STRICT),
            model_entry(
                **vlm, served_model_name=SMALL, allow_private_image_urls=True, max_image_mb=0.01
            ),
            model_entry(model_path=LM, served_model_name=LM),
            model_entry(model_path=str(tiny_omni_path), model_type="vlm", served_model_name=OMNI),
        ],
    )
    app = create_app(config, command=command)
    async with app.router.lifespan_context(app):
        yield app


async def describe(sdk: openai.AsyncOpenAI, messages: list, model: str = VL, **extra: Any) -> Any:
    return await sdk.chat.completions.create(
        model=model, messages=messages, max_tokens=8, temperature=0, **extra
    )


async def error_of(http: httpx.AsyncClient, messages: list, model: str = VL) -> tuple[int, dict]:
    body = {"model": model, "messages": messages, "max_tokens": 4}
    response = await http.post("/v1/chat/completions", json=body)
    return response.status_code, response.json()["error"]


async def test_every_format_as_data_and_http_url(
    sdk: openai.AsyncOpenAI, images: ImageServer
) -> None:
    answers: dict[str, set[str]] = {}
    for fmt, _ in FORMATS:
        path = f"/pic.{fmt.lower()}"
        for url in (data_url(images.files[path]), images.url(path)):
            reply = await describe(sdk, with_images(url))
            assert reply.choices[0].finish_reason == "length"
            answers.setdefault(fmt, set()).add(reply.choices[0].message.content or "")
    assert all(len(texts) == 1 for texts in answers.values()), answers  # same bytes, same text
    lossless = {fmt: texts for fmt, texts in answers.items() if fmt not in LOSSY}
    assert len(set.union(*lossless.values())) == 1, lossless  # same pixels, same text


async def test_image_stream_text_only_and_usage(sdk: openai.AsyncOpenAI) -> None:
    image = data_url(picture((112, 56)))
    whole = await describe(sdk, with_images(image))
    stream = await sdk.chat.completions.create(
        model=VL,
        messages=with_images(image),
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage is not None and whole.usage is not None
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens

    plain = await describe(sdk, [{"role": "user", "content": "describe this image"}])
    assert plain.usage is not None
    # 112x56 pixels are 4x2 image tokens, between <|vision_start|> and <|vision_end|>.
    assert whole.usage.prompt_tokens == plain.usage.prompt_tokens + 8 + 2
    assert plain.choices[0].message.content != whole.choices[0].message.content


async def test_several_images_and_detail(sdk: openai.AsyncOpenAI, images: ImageServer) -> None:
    one = await describe(sdk, with_images(images.url("/big.png")))
    two = await describe(sdk, with_images(images.url("/big.png"), data_url(picture())))
    assert one.usage and two.usage
    assert two.usage.prompt_tokens == one.usage.prompt_tokens + 4 + 2  # 56x56: 2x2 tokens
    # A wide image: the processor's own pixel cap keeps more of it than "low" does.
    high = await describe(sdk, with_images(images.url("/wide.png"), detail="high"))
    low = await describe(sdk, with_images(images.url("/wide.png"), detail="low"))
    assert high.usage and low.usage
    assert low.usage.prompt_tokens < high.usage.prompt_tokens


async def test_bad_base64_is_400(http: httpx.AsyncClient) -> None:
    status, error = await error_of(http, with_images("data:image/png;base64,iVBOR&&w0KGgo="))
    assert status == 400
    assert error["param"] == "messages[0].content[0].image_url.url"
    assert "base64" in error["message"]


async def test_unreachable_url_is_400_naming_it(http: httpx.AsyncClient) -> None:
    with ImageServer() as gone:
        url = gone.url("/pic.png")
    status, error = await error_of(http, with_images(data_url(picture()), url))
    assert status == 400
    assert url in error["message"]
    assert error["param"] == "messages[0].content[1].image_url.url"
    assert error["code"] == "image_url_unreachable"


async def test_oversized_image_is_413(http: httpx.AsyncClient, images: ImageServer) -> None:
    big = images.files["/big.png"]
    assert len(big) > 0.01 * (1 << 20)
    for url in (data_url(big), images.url("/big.png")):
        status, error = await error_of(http, with_images(url), model=SMALL)
        assert status == 413
        assert error["code"] == "image_too_large"
        assert error["param"] == "messages[0].content[0].image_url.url"


async def test_loopback_is_refused_by_default(http: httpx.AsyncClient, images: ImageServer) -> None:
    seen = len(images.requests)
    url = images.url("/pic.png")
    status, error = await error_of(http, with_images(url), model=STRICT)
    assert status == 400
    assert error["code"] == "image_url_refused"
    assert url in error["message"]
    assert len(images.requests) == seen


async def test_undecodable_image_is_400_from_the_worker(http: httpx.AsyncClient) -> None:
    not_an_image = data_url(b"GIF89a, or so it says")
    status, error = await error_of(http, with_images(data_url(picture()), not_an_image))
    assert status == 400
    assert error["param"] == "messages[0].content[1].image_url"
    assert "cannot be decoded" in error["message"]


async def test_images_need_a_vision_model(http: httpx.AsyncClient, app: Starlette) -> None:
    status, error = await error_of(http, with_images(data_url(picture())), model=LM)
    assert status == 400
    assert error["code"] == "images_not_supported"
    assert error["param"] == "messages[0].content[0]"
    assert gateway_of(app).registry.resolve(LM).status().state == "unloaded"


async def test_request_shape_checks(http: httpx.AsyncClient) -> None:
    image = {"type": "image_url", "image_url": {"url": data_url(picture())}}
    system = [{"role": "system", "content": [image]}, {"role": "user", "content": "hi"}]
    status, error = await error_of(http, system)
    assert status == 400 and error["param"] == "messages[0].content[0].type"

    status, error = await error_of(http, with_images(*[data_url(picture())] * 4))
    assert status == 400 and error["code"] == "too_many_images"

    bad_detail = with_images(data_url(picture()), detail="ultra")
    status, error = await error_of(http, bad_detail)
    assert status == 400 and error["param"] == "messages[0].content[0].image_url.detail"


async def test_completions_on_a_vision_model(sdk: openai.AsyncOpenAI) -> None:
    # Greedy: sampled, the random tiny model may draw its end of turn early.
    reply = await sdk.completions.create(
        model=VL, prompt="a red square", max_tokens=5, temperature=0
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage is not None and reply.usage.completion_tokens == 5


def with_audio(data: bytes, text: str = "what is said here?") -> list:
    audio = {"data": base64.b64encode(data).decode(), "format": "wav"}
    return [
        {
            "role": "user",
            "content": [
                {"type": "input_audio", "input_audio": audio},
                {"type": "text", "text": text},
            ],
        }
    ]


def wav_tone() -> bytes:
    from tests.workers.common.test_audio_decoding import encode as encode_audio

    return encode_audio("wav", "pcm_s16le", rate=16_000, layout="mono")


async def test_input_audio_to_a_model_without_audio_is_400_naming_it(
    sdk: openai.AsyncOpenAI, app: Starlette
) -> None:
    # The tiny Qwen2-VL has no audio encoder: its worker says so, naming the model.
    with pytest.raises(openai.BadRequestError) as caught:
        await describe(sdk, with_audio(wav_tone()))
    error = caught.value.body
    assert isinstance(error, dict)
    assert f"The model '{VL}' does not accept audio" in error["message"]
    assert error["param"] == "messages[0].content[0].input_audio"
    assert error["code"] == "audio_not_supported"
    # A language model: refused by the gateway, before any worker starts.
    with pytest.raises(openai.BadRequestError) as caught:
        await describe(sdk, with_audio(wav_tone()), model=LM)
    error = caught.value.body
    assert isinstance(error, dict)
    assert f"The model '{LM}'" in error["message"] and "does not accept audio" in error["message"]
    assert gateway_of(app).registry.resolve(LM).status().state == "unloaded"


async def test_input_audio_that_is_not_base64_is_400(http: httpx.AsyncClient) -> None:
    messages = with_audio(b"")
    messages[0]["content"][0]["input_audio"]["data"] = "RIFF&&not base64"
    status, error = await error_of(http, messages)
    assert status == 400
    assert error["param"] == "messages[0].content[0].input_audio.data"
    assert "base64" in error["message"]


async def test_input_audio_to_an_omni_model(sdk: openai.AsyncOpenAI) -> None:
    tone = await describe(sdk, with_audio(wav_tone()), model=OMNI)
    plain = await describe(
        sdk,
        [{"role": "user", "content": [{"type": "text", "text": "what is said here?"}]}],
        model=OMNI,
    )
    assert tone.choices[0].finish_reason == "length" and tone.choices[0].message.content
    assert tone.usage is not None and plain.usage is not None
    # One second of audio: 25 audio tokens and their two markers in the prompt.
    assert tone.usage.prompt_tokens == plain.usage.prompt_tokens + 27
    # Streamed, with an image beside the audio.
    image = {"type": "image_url", "image_url": {"url": data_url(picture())}}
    messages = with_audio(wav_tone())
    messages[0]["content"].insert(0, image)
    stream = await sdk.chat.completions.create(
        model=OMNI,
        messages=messages,
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    usage = chunks[-1].usage
    assert usage is not None and usage.prompt_tokens > tone.usage.prompt_tokens


async def test_a_tool_results_image_is_seen_in_the_tools_turn(sdk: openai.AsyncOpenAI) -> None:
    """A screenshot a tool returned reaches the real worker through Qwen2-VL's chat
    template as an image of the tool's turn: its image tokens count."""
    call = {"id": "call_1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}

    def conversation(result: Any) -> list[Any]:
        return [
            {"role": "user", "content": "take a screenshot"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": result},
        ]

    image = {"type": "image_url", "image_url": {"url": data_url(picture((112, 56)))}}
    seen = await describe(sdk, conversation([{"type": "text", "text": "the screen"}, image]))
    plain = await describe(sdk, conversation("the screen"))
    assert seen.usage is not None and plain.usage is not None
    assert seen.usage.prompt_tokens == plain.usage.prompt_tokens + 8 + 2  # 4x2 image tokens


async def test_a_pdfs_pages_reach_the_worker_as_images(sdk: openai.AsyncOpenAI) -> None:
    """A PDF for a vision model: each page rendered, its text beside it: the prompt
    the page's picture and its text sent as parts would be, to the token."""
    from mlx_gateway.supervisor.engine.pdf import read_pdf
    from tests.fixtures.pdfs import b64, text_pdf

    data = text_pdf("Hello page one")
    pdf = {"type": "file", "file": {"file_data": b64(data)}}
    read = await describe(sdk, [{"role": "user", "content": [pdf]}])
    (page,) = read_pdf(data, render=True, max_pages=1, param="test")
    assert page.png is not None and page.text == "Hello page one"
    parts = [
        {"type": "image_url", "image_url": {"url": data_url(page.png)}},
        {"type": "text", "text": "--- Page 1 ---\nHello page one\n"},
    ]
    sent = await describe(sdk, [{"role": "user", "content": parts}])
    text = await describe(sdk, [{"role": "user", "content": parts[1:]}])
    assert read.usage is not None and sent.usage is not None and text.usage is not None
    assert read.usage.prompt_tokens == sent.usage.prompt_tokens > text.usage.prompt_tokens + 10
    assert read.choices[0].message.content == sent.choices[0].message.content
