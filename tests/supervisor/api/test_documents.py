"""Documents on every surface, with the real app and fake workers: Anthropic
``document`` blocks (in a user message and inside a ``tool_result``), chat
completions' ``file`` parts and the Responses API's ``input_file``, sent through the
official SDKs where they have the shape. A text model reads a PDF's text layer page
by page (the fake worker echoes it back); a vision model's worker gets each page as
a PNG with its text beside it. Caps and the errors are named."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from tests.fixtures.image_server import ImageServer
from tests.fixtures.pdfs import b64, encrypted, extracted, text_pdf

from ..fakes import fake_command, fake_config
from .clients import asgi_client
from .lm_app import OK, VISION, app, http, sdk
from .test_anthropic_api import client_for

pytestmark = pytest.mark.slow
__all__ = ["app", "http", "sdk"]  # fixtures

PDF = text_pdf("Hello page one", "Second page here")
READ = "--- Page 1 --- Hello page one --- Page 2 --- Second page here"
SEEN = READ.split()
"""The words a text model reads for :data:`PDF`."""
SMALL = "small/fake/ok"  # max_document_pages: 1, max_document_mb: 0.001


def pdf_block(data: bytes = PDF, **extra: Any) -> dict[str, Any]:
    source = {"type": "base64", "media_type": "application/pdf", "data": b64(data)}
    return {"type": "document", "source": source, **extra}


def words(message: Any) -> list[str]:
    return str(message.content[0].text).split()


@pytest.fixture
def claude(app: Starlette) -> anthropic.AsyncAnthropic:
    return client_for(app)


@pytest.fixture
async def capped() -> AsyncIterator[httpx.AsyncClient]:
    config = fake_config(
        {"model_path": SMALL, "max_document_pages": 1, "max_document_mb": 0.001},
        {"model_path": OK},
        allow_private_image_urls=True,  # the document server below is on loopback
    )
    app = create_app(config, command=fake_command)
    async with app.router.lifespan_context(app), asgi_client(app, timeout=5.0) as client:
        yield client


def test_the_test_pdf_has_the_text_pypdf_extracts() -> None:
    assert extracted(PDF) == ["Hello page one", "Second page here"]


# ---------------------------------------------------------------- Anthropic


async def test_a_pdf_document_block_is_read_page_by_page(claude: anthropic.AsyncAnthropic) -> None:
    message = await claude.messages.create(
        model=OK,
        max_tokens=40,
        messages=[{"role": "user", "content": [pdf_block(), {"type": "text", "text": "end"}]}],
    )
    assert words(message) == [*SEEN, "end"]


async def test_title_and_context_come_first_and_citations_are_accepted(
    claude: anthropic.AsyncAnthropic,
) -> None:
    block = pdf_block(title="Report", context="From the lab.", citations={"enabled": True})
    message = await claude.messages.create(
        model=OK, max_tokens=40, messages=[{"role": "user", "content": [block]}]
    )
    assert words(message) == ["Document:", "Report", "From", "the", "lab.", *SEEN]
    assert all(b.type == "text" for b in message.content)  # answered without citations


async def test_text_content_and_base64_text_documents(claude: anthropic.AsyncAnthropic) -> None:
    text = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "plain words"},
    }
    content = {
        "type": "document",
        "source": {"type": "content", "content": [{"type": "text", "text": "block words"}]},
        "title": "T",
    }
    encoded = {
        "type": "document",
        "source": {"type": "base64", "media_type": "text/plain", "data": b64(b"coded words")},
    }
    message = await claude.messages.create(
        model=OK, max_tokens=40, messages=[{"role": "user", "content": [text, content, encoded]}]
    )
    assert words(message) == [
        "plain",
        "words",
        "Document:",
        "T",
        "block",
        "words",
        "coded",
        "words",
    ]


def claude_code_read(result: list[dict[str, Any]], last: str) -> list[dict[str, Any]]:
    """A conversation whose last tool result is Claude Code's Read of a file."""
    use = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/r.pdf"}}
    tool_result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": result}
    return [
        {"role": "user", "content": "read the report"},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [tool_result, {"type": "text", "text": last}]},
    ]


READ_PDF = [{"type": "text", "text": "PDF file read: /r.pdf (386 bytes)"}, pdf_block()]
"""Claude Code 2.1.332's Read of a PDF, as its tool_result content."""


async def test_a_pdf_inside_a_tool_result_reaches_a_text_model(
    claude: anthropic.AsyncAnthropic,
) -> None:
    message = await claude.messages.create(
        model=OK, max_tokens=60, messages=claude_code_read(READ_PDF, "results")
    )
    assert words(message) == ["PDF", "file", "read:", "/r.pdf", "(386", "bytes)", *SEEN]


async def test_a_vision_model_gets_the_pages_as_images_with_their_text(
    claude: anthropic.AsyncAnthropic,
) -> None:
    message = await claude.messages.create(
        model=VISION, max_tokens=60, messages=claude_code_read(READ_PDF, "media")
    )
    parts = ["tool:text", "tool:image", "tool:text", "tool:image", "tool:text"]
    assert words(message) == [*parts, "frames=2", "png=2"]
    message = await claude.messages.create(
        model=VISION, max_tokens=60, messages=claude_code_read(READ_PDF, "results")
    )
    shown = "PDF file read: /r.pdf (386 bytes) <image> --- Page 1 --- Hello page one"
    shown += " <image> --- Page 2 --- Second page here"
    assert words(message) == shown.split()


async def test_document_text_counts_in_count_tokens(http: httpx.AsyncClient) -> None:
    async def count(content: Any) -> int:
        body = {"model": OK, "messages": [{"role": "user", "content": content}]}
        r = await http.post("/v1/messages/count_tokens", json=body)
        assert r.status_code == 200, r.text
        return int(r.json()["input_tokens"])

    as_text = await count("Hello page one Second page here")
    as_pdf = await count([pdf_block()])
    assert as_pdf == as_text + 2 * 4  # the same words, and a marker of 4 a page


# ---------------------------------------------------------------- OpenAI


async def test_a_chat_file_part_through_the_openai_sdk(sdk: openai.AsyncOpenAI) -> None:
    completion = await sdk.chat.completions.create(
        model=OK,
        max_tokens=40,
        messages=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "file",
                        "file": {
                            "filename": "r.pdf",
                            "file_data": f"data:application/pdf;base64,{b64(PDF)}",
                        },
                    },
                    {"type": "text", "text": "end"},
                ],
            }
        ],
    )
    assert str(completion.choices[0].message.content).split() == [
        "Document:",
        "r.pdf",
        *SEEN,
        "end",
    ]


async def test_a_responses_input_file_through_the_openai_sdk(sdk: openai.AsyncOpenAI) -> None:
    response = await sdk.responses.create(
        model=OK,
        max_output_tokens=40,
        input=[
            {
                "role": "user",
                "content": [
                    {
                        "type": "input_file",
                        "filename": "r.pdf",
                        "file_data": f"data:application/pdf;base64,{b64(PDF)}",
                    },
                    {"type": "input_text", "text": "end"},
                ],
            }
        ],
    )
    assert response.output_text.split() == ["Document:", "r.pdf", *SEEN, "end"]
    with pytest.raises(openai.BadRequestError) as refused:
        await sdk.responses.create(
            model=OK,
            input=[{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}],
        )
    assert "no Files API" in str(refused.value)
    assert str(refused.value.body["param"]).endswith("content[0].file.file_id")  # type: ignore[index]


async def test_a_file_url_is_fetched_under_the_url_rules(
    capped: httpx.AsyncClient, http: httpx.AsyncClient
) -> None:
    with ImageServer() as server:
        server.files["/r.pdf"] = PDF
        part = {"type": "input_file", "file_url": server.url("/r.pdf")}
        body = {
            "model": OK,
            "max_output_tokens": 40,
            "input": [{"role": "user", "content": [part]}],
        }
        r = await capped.post("/v1/responses", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["output"][-1]["content"][0]["text"].split() == SEEN
        r = await http.post("/v1/responses", json=body)  # private addresses refused
    assert r.status_code == 400 and "was refused" in r.json()["error"]["message"]
    assert r.json()["error"]["message"].startswith("The document URL")


# ---------------------------------------------------------------- caps and errors


def chat(model: str, part: dict[str, Any]) -> dict[str, Any]:
    return {"model": model, "max_tokens": 20, "messages": [{"role": "user", "content": [part]}]}


def file_part(data: bytes) -> dict[str, Any]:
    return {"type": "file", "file": {"file_data": b64(data)}}


async def test_the_caps_are_400s_naming_their_keys(capped: httpx.AsyncClient) -> None:
    r = await capped.post("/v1/chat/completions", json=chat(SMALL, file_part(PDF)))
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "document_too_long"
    assert "max_document_pages" in r.json()["error"]["message"]
    big = text_pdf("x" * 2000)
    r = await capped.post("/v1/chat/completions", json=chat(SMALL, file_part(big)))
    assert r.status_code == 400 and "max_document_mb" in r.json()["error"]["message"]
    assert r.json()["error"]["param"] == "messages[0].content[0].file.file_data"


async def test_a_pdf_without_text_to_a_text_model_names_the_vision_models(
    http: httpx.AsyncClient,
) -> None:
    r = await http.post("/v1/chat/completions", json=chat(OK, file_part(text_pdf(""))))
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "document_has_no_text" and VISION in error["message"]
    r = await http.post("/v1/chat/completions", json=chat(VISION, file_part(text_pdf(""))))
    assert r.status_code == 200, r.text  # a vision model sees the page


async def test_encrypted_and_broken_pdfs_are_400s_naming_the_part(
    http: httpx.AsyncClient,
) -> None:
    r = await http.post("/v1/chat/completions", json=chat(OK, file_part(encrypted(PDF))))
    assert r.status_code == 400 and r.json()["error"]["code"] == "encrypted_document"
    assert r.json()["error"]["param"] == "messages[0].content[0].file.file_data"
    r = await http.post("/v1/chat/completions", json=chat(OK, file_part(PDF[:200])))
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_document"
    assert "messages[0].content[0].file.file_data" in r.json()["error"]["message"]
