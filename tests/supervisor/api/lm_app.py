"""The real app with fake-worker models for the language-model API tests.

``say <text>`` makes the fake worker send ``<text>`` exactly (four characters per
step), so a test scripts what "the model" writes: tool calls in a family's format,
thinking blocks, JSON. ``lab/fake/reasoner`` reports thinking markers and the
``json_tools`` format in its Ready, as a real worker does for a Qwen3 model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app

from ..fakes import fake_command, fake_config
from .clients import asgi_client, strict_sdk

OK = "lab/fake/ok"
"""Explicit parsers: ``tool_call_parser: hermes``, ``reasoning_parser: think``."""
REASONER = "lab/fake/reasoner"
"""Parsers detected from what its worker reports."""
PLAIN = "plain/fake/ok"
"""No parsers at all (``none``)."""
XML = "xml/fake/ok"
"""``tool_call_parser: qwen3_coder``."""
MLX_PARSED = "mlx/fake/mlxparsed"
"""Reports a format only mlx-lm parses: its worker parses the calls."""
VISION = "vis/fake/ok"
"""``model_type: vlm``: image parts reach its (fake) worker as frames."""

PNG_1PX = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQ"
    "AAAABJRU5ErkJggg=="
)
"""A one-pixel PNG, base64."""

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}


def say(text: str) -> list[dict[str, Any]]:
    """A user message that makes the fake model write ``text``."""
    return [{"role": "user", "content": f"say {text}"}]


def hermes_call(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


@pytest.fixture
async def app() -> AsyncIterator[Starlette]:
    config = fake_config(
        {"model_path": OK, "tool_call_parser": "hermes", "reasoning_parser": "think"},
        {"model_path": REASONER},
        {"model_path": PLAIN, "tool_call_parser": "none", "reasoning_parser": "none"},
        {"model_path": XML, "tool_call_parser": "qwen3_coder"},
        {"model_path": MLX_PARSED},
        {"model_path": VISION, "model_type": "vlm"},
    )
    app = create_app(config, command=fake_command)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def http(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    async with asgi_client(app, timeout=5.0) as client:  # httpx's default timeout
        yield client


@pytest.fixture
def sdk(http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return strict_sdk(http)
