"""A text request's walk enters the media code in at most five stops: the real app
with fake workers, its event loop traced with ``sys.setprofile`` while a request is
served; every call of a function defined in a media module counts as one stop. The
same tracer counts a request with an image, so it can see the media code at work."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import pytest

from mlx_gateway.supervisor import engine

from .lm_app import OK, PNG_1PX, VISION, app, http

pytestmark = pytest.mark.slow
__all__ = ["app", "http"]  # fixtures

ENGINE = Path(engine.__file__).parent
MEDIA_MODULES = {
    str(ENGINE / f"{name}.py")
    for name in (
        "media_table",
        "media_walk",
        "media_policy",
        "url_reader",
        "documents",
        "pdf",
        "vision_input",
        "video_input",
        "audio_input",
        "embedding_images",
    )
}
MOST_STOPS = 5


@contextmanager
def media_stops() -> Iterator[list[str]]:
    """The media functions called (one entry a call) on this thread while inside."""
    stops: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename in MEDIA_MODULES:
            stops.append(f"{Path(frame.f_code.co_filename).stem}.{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        yield stops
    finally:
        sys.setprofile(None)


def claude_code_like(model: str) -> dict[str, Any]:
    """An Anthropic request as a coding agent sends one: many text blocks, no media."""
    blocks = [{"type": "text", "text": f"line {i} of the context"} for i in range(200)]
    return {
        "model": model,
        "max_tokens": 8,
        "system": [{"type": "text", "text": "You are a coding agent."}],
        "messages": [
            {"role": "user", "content": [*blocks, {"type": "text", "text": "say ok"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
            {"role": "user", "content": [{"type": "text", "text": "say done"}]},
        ],
    }


@pytest.mark.parametrize("model", [OK, VISION])
async def test_a_text_request_enters_media_code_in_at_most_five_stops(
    http: httpx.AsyncClient, model: str
) -> None:
    chat = {"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": "say ok"}]}
    for path, body in [("/v1/chat/completions", chat), ("/v1/messages", claude_code_like(model))]:
        with media_stops() as stops:
            r = await http.post(path, json=body)
        assert r.status_code == 200, r.text
        assert len(stops) <= MOST_STOPS, (path, stops)


async def test_the_tracer_sees_a_request_with_an_image(http: httpx.AsyncClient) -> None:
    image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG_1PX}"}}
    content = [image, {"type": "text", "text": "say ok"}]
    body = {"model": VISION, "max_tokens": 8, "messages": [{"role": "user", "content": content}]}
    with media_stops() as stops:
        r = await http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert len(stops) > MOST_STOPS and "url_reader.read_url" in stops, stops
