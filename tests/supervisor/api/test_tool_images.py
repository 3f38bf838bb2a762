"""Pictures in tool results on every surface, with the real app and fake workers: a
vision model's worker receives them as images of the tool's turn (a payload frame
each, a PNG); a text-only model reads a one-line note in their place, and the
request is a 200, logged as leaving them out."""

from __future__ import annotations

import base64
import logging
from typing import Any

import httpx
import pytest

from .lm_app import OK, PNG_1PX, VISION, app, http

pytestmark = pytest.mark.slow
__all__ = ["app", "http"]  # fixtures

NOTE = f"[An image was left out here: the model '{OK}' reads text only.]"
PNG_URL = f"data:image/png;base64,{PNG_1PX}"
CALL = {"id": "call_1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}


def anthropic_body(model: str, last: str) -> dict[str, Any]:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG_1PX},
    }
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [{"type": "text", "text": "the screen:"}, image],
    }
    return {
        "model": model,
        "max_tokens": 40,
        "messages": [
            {"role": "user", "content": "take a screenshot"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}}],
            },
            {"role": "user", "content": [result, {"type": "text", "text": last}]},
        ],
    }


def chat_body(model: str, last: str) -> dict[str, Any]:
    image = {"type": "image_url", "image_url": {"url": PNG_URL}}
    return {
        "model": model,
        "max_tokens": 40,
        "messages": [
            {"role": "user", "content": "take a screenshot"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "content": [{"type": "text", "text": "the screen:"}, image],
            },
            {"role": "user", "content": last},
        ],
    }


def responses_body(model: str, last: str) -> dict[str, Any]:
    output = [
        {"type": "input_text", "text": "the screen:"},
        {"type": "input_image", "image_url": PNG_URL},
    ]
    return {
        "model": model,
        "max_output_tokens": 40,
        "input": [
            {"role": "user", "content": "take a screenshot"},
            {"type": "function_call", "call_id": "call_1", "name": "shot", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": output},
            {"role": "user", "content": last},
        ],
    }


SURFACES = [
    ("/v1/messages", anthropic_body, lambda r: r["content"][0]["text"]),
    ("/v1/chat/completions", chat_body, lambda r: r["choices"][0]["message"]["content"]),
    ("/v1/responses", responses_body, lambda r: r["output"][-1]["content"][0]["text"]),
]


@pytest.mark.parametrize(
    ("path", "body", "answer"), SURFACES, ids=["messages", "chat", "responses"]
)
async def test_a_tool_results_image_reaches_a_vision_model(
    http: httpx.AsyncClient, path: str, body: Any, answer: Any
) -> None:
    r = await http.post(path, json=body(VISION, "media"))
    assert r.status_code == 200, r.text
    # the worker got the image inside the tool's message, as its one PNG frame
    assert answer(r.json()).split() == ["tool:text", "tool:image", "frames=1", "png=1"]


@pytest.mark.parametrize(
    ("path", "body", "answer"), SURFACES, ids=["messages", "chat", "responses"]
)
async def test_a_text_model_reads_a_note_in_the_images_place(
    http: httpx.AsyncClient, path: str, body: Any, answer: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        r = await http.post(path, json=body(OK, "results"))
    assert r.status_code == 200, r.text
    assert answer(r.json()).split() == ["the", "screen:", *NOTE.split()]
    logged = [rec.getMessage() for rec in caplog.records]
    assert any("1 image(s) in tool results left out" in line and OK in line for line in logged)
    assert any("1 tool-result image(s) left out (text-only model)" in line for line in logged)


async def test_a_user_image_to_a_text_model_is_still_a_400(http: httpx.AsyncClient) -> None:
    body = chat_body(OK, "hi")
    body["messages"][-1]["content"] = [{"type": "image_url", "image_url": {"url": PNG_URL}}]
    r = await http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "images_not_supported"


async def test_tool_result_images_count_in_max_images(http: httpx.AsyncClient) -> None:
    body = chat_body(VISION, "media")
    image = {"type": "image_url", "image_url": {"url": PNG_URL}}
    body["messages"][2]["content"] = [image] * 9  # max_images: 8
    r = await http.post("/v1/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["code"] == "too_many_images"


def test_png_1px_is_a_png() -> None:
    assert base64.b64decode(PNG_1PX).startswith(b"\x89PNG")
