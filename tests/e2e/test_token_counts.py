"""Token counting and tokenizing on real workers (the tiny llama and the tiny
Qwen2-VL): ``/v1/chat/completions/input_tokens``, ``/v1/responses/input_tokens``
(through the OpenAI SDK's ``responses.input_tokens.count``), Anthropic's
``count_tokens`` on a vision model, ``/tokenize`` and ``/detokenize``. Every count
is checked against the ``usage.prompt_tokens`` the worker reports for the same
body, with tools and with images."""

from __future__ import annotations

import base64
import io
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

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

LM = "tiny"
VL = "tiny-vl"
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
MESSAGES: list[Any] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "what is the weather in Paris?"},
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tiny_lm_path: Path, tiny_vlm_path: Path) -> AsyncIterator[Starlette]:
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=2),
        models=[
            model_entry(model_path=str(tiny_lm_path), served_model_name=LM, idle_timeout=0),
            model_entry(
                model_path=str(tiny_vlm_path),
                served_model_name=VL,
                model_type="vlm",
                idle_timeout=0,
            ),
        ],
    )
    app = create_app(config)
    async with app.router.lifespan_context(app):
        yield app


def picture(size: tuple[int, int]) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


async def count(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> int:
    r = await http.post(path, json=body)
    assert r.status_code == 200, r.text
    reply = r.json()
    assert set(reply) == {"object", "input_tokens"}
    return int(reply["input_tokens"])


async def prompt_tokens(sdk: openai.AsyncOpenAI, body: dict[str, Any]) -> int:
    reply = await sdk.chat.completions.create(**body, max_tokens=1)
    assert reply.usage is not None
    return reply.usage.prompt_tokens


@pytest.mark.parametrize("tools", [None, TOOLS])
async def test_chat_count_equals_the_prompt_tokens(
    http: httpx.AsyncClient, sdk: openai.AsyncOpenAI, tools: Any
) -> None:
    body: dict[str, Any] = {"model": LM, "messages": MESSAGES}
    if tools:
        body["tools"] = tools
    counted = await count(http, "/v1/chat/completions/input_tokens", body)
    assert counted == await prompt_tokens(sdk, body)
    if tools:
        plain = await count(http, "/v1/chat/completions/input_tokens", {**body, "tools": None})
        assert counted > plain  # the tools are in the count


async def test_chat_count_with_images_on_a_vision_model(
    http: httpx.AsyncClient, sdk: openai.AsyncOpenAI
) -> None:
    counts = []
    for size in [(56, 56), (112, 112)]:
        content = [
            {"type": "image_url", "image_url": {"url": picture(size)}},
            {"type": "text", "text": "what is this?"},
        ]
        body: dict[str, Any] = {"model": VL, "messages": [{"role": "user", "content": content}]}
        counted = await count(http, "/v1/chat/completions/input_tokens", body)
        assert counted == await prompt_tokens(sdk, body)
        counts.append(counted)
    assert counts[1] > counts[0]  # a bigger picture is more image tokens


async def test_responses_count_through_the_sdk(sdk: openai.AsyncOpenAI) -> None:
    tools: Any = [
        {
            "type": "function",
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        }
    ]
    args: dict[str, Any] = {
        "model": LM,
        "instructions": "Be brief.",
        "input": "what is the weather in Paris?",
        "tools": tools,
    }
    counted = await sdk.responses.input_tokens.count(**args)
    assert counted.object == "response.input_tokens"
    response = await sdk.responses.create(**args, max_output_tokens=16)
    assert response.usage is not None
    assert counted.input_tokens == response.usage.input_tokens
    # continuing a stored response counts its conversation too
    follow = {"model": LM, "input": "and in Rome?", "previous_response_id": response.id}
    more = await sdk.responses.input_tokens.count(**follow)
    after = await sdk.responses.create(**follow, max_output_tokens=4)
    assert after.usage is not None and more.input_tokens == after.usage.input_tokens
    alone = await sdk.responses.input_tokens.count(model=LM, input="and in Rome?")
    assert more.input_tokens > alone.input_tokens


async def test_responses_count_with_an_image(
    http: httpx.AsyncClient, sdk: openai.AsyncOpenAI
) -> None:
    body: dict[str, Any] = {
        "model": VL,
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": picture((56, 56))},
                    {"type": "input_text", "text": "what is this?"},
                ],
            }
        ],
    }
    counted = await count(http, "/v1/responses/input_tokens", body)
    response = await sdk.responses.create(**body, max_output_tokens=1)
    assert response.usage is not None and counted == response.usage.input_tokens


async def test_anthropic_count_on_a_vision_model(http: httpx.AsyncClient) -> None:
    png = picture((56, 56)).split(",", 1)[1]
    content = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
        {"type": "text", "text": "what is this?"},
    ]
    body: dict[str, Any] = {"model": VL, "messages": [{"role": "user", "content": content}]}
    r = await http.post("/v1/messages/count_tokens", json=body)
    assert r.status_code == 200, r.text
    message = await http.post("/v1/messages", json={**body, "max_tokens": 1})
    assert message.status_code == 200, message.text
    assert r.json()["input_tokens"] == message.json()["usage"]["input_tokens"]


async def test_tokenize_and_detokenize(http: httpx.AsyncClient, tiny_lm_path: Path) -> None:
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(tiny_lm_path))
    text = "hello world, the quick brown fox"
    r = await http.post("/tokenize", json={"model": LM, "content": text})
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["tokens"] == hf.encode(text, add_special_tokens=False)
    assert reply["count"] == len(reply["tokens"]) and reply["max_model_len"] == 2048
    pieces = await http.post("/tokenize", json={"model": LM, "content": text, "with_pieces": True})
    listed = pieces.json()["tokens"]
    assert [t["id"] for t in listed] == reply["tokens"]
    assert "".join(t["piece"] for t in listed) == text
    back = await http.post("/detokenize", json={"model": LM, "tokens": reply["tokens"]})
    assert back.status_code == 200 and back.json()["content"] == text

    # vLLM's chat form: the count a completion of the same messages reports
    chat = await http.post("/tokenize", json={"model": LM, "messages": MESSAGES, "tools": TOOLS})
    assert chat.status_code == 200, chat.text
    counted = await count(
        http,
        "/v1/chat/completions/input_tokens",
        {"model": LM, "messages": MESSAGES, "tools": TOOLS},
    )
    assert chat.json()["count"] == counted


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/tokenize", {"content": "x"}, "model"),  # two models served: model is required
        ("/tokenize", {"model": LM}, "content"),
        ("/tokenize", {"model": "nope", "content": "x"}, "model"),
        ("/detokenize", {"model": LM, "tokens": [10**6]}, "tokens"),
        ("/v1/chat/completions/input_tokens", {"model": LM, "messages": "x"}, "messages"),
        (
            "/v1/chat/completions/input_tokens",
            {
                "model": LM,
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
                ],
            },
            "messages",
        ),
    ],
)
async def test_bad_requests(http: httpx.AsyncClient, path: str, body: Any, param: str) -> None:
    r = await http.post(path, json=body)
    assert r.status_code in (400, 404), r.text
    error = r.json()["error"]
    assert (error["param"] or "").startswith(param), error


async def test_a_pdf_counts_as_the_text_the_model_reads(http: httpx.AsyncClient) -> None:
    """A PDF document on the tiny llama: counted (``count_tokens``) as its pages' text
    as pypdf extracts it, with the page markers, to the token; and the message's
    usage says the same."""
    from tests.fixtures.pdfs import b64, extracted, text_pdf

    pdf = text_pdf("The quarterly numbers rose by a tenth", "Costs fell sharply in May")
    marked = "".join(f"--- Page {n} ---\n{text}\n" for n, text in enumerate(extracted(pdf), 1))
    source = {"type": "base64", "media_type": "application/pdf", "data": b64(pdf)}
    document = [{"type": "document", "source": source}]

    async def counted(content: Any) -> int:
        body = {"model": LM, "messages": [{"role": "user", "content": content}]}
        r = await http.post("/v1/messages/count_tokens", json=body)
        assert r.status_code == 200, r.text
        return int(r.json()["input_tokens"])

    as_document = await counted(document)
    assert as_document == await counted(marked)
    body = {"model": LM, "max_tokens": 1, "messages": [{"role": "user", "content": document}]}
    r = await http.post("/v1/messages", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["input_tokens"] == as_document
    plain_text = "\n".join(extracted(pdf))
    plain = await counted(plain_text)
    markers = await counted("--- Page 1 ---\n--- Page 2 ---\n" + plain_text) - plain
    assert abs(as_document - markers - plain) <= 0.1 * plain  # page markers aside
