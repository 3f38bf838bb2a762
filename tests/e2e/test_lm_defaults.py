"""The model's own defaults, through the HTTP API on the real lm worker: sampling
fields a request leaves out come from the model's ``generation_config.json``, the
YAML entry's keys win over it, and ``/v1/models`` gives ``context_window`` from the
model's ``config.json`` before the model first loads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import openai
import pytest
import pytest_asyncio
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry

from ..fixtures.tiny_models import CONTEXT_LENGTH, build_tiny_lm

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

GREEDY = "greedy"
"""generation_config.json: do_sample false (greedy), max_new_tokens 5."""
SAMPLED = "sampled"
"""The same folder; its YAML entry sets temperature 1.0 and max_tokens 7."""
ASK = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-lm-generation-config")
    generation = {"do_sample": False, "temperature": 0.7, "max_new_tokens": 5, "top_k": 20}
    return build_tiny_lm(out, generation_config=generation)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(model_path: Path) -> AsyncIterator[Starlette]:
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=2),
        models=[
            model_entry(model_path=str(model_path), served_model_name=GREEDY, idle_timeout=0),
            model_entry(
                model_path=str(model_path),
                served_model_name=SAMPLED,
                idle_timeout=0,
                temperature=1.0,
                max_tokens=7,
                context_length=512,
            ),
        ],
    )
    app = create_app(config)
    async with app.router.lifespan_context(app):
        yield app


async def test_context_window_before_the_first_load(http: httpx.AsyncClient) -> None:
    listing = (await http.get("/v1/models")).json()["data"]
    by_id = {m["id"]: m for m in listing}
    assert by_id[GREEDY]["state"] != "ready"  # not loaded yet
    assert by_id[GREEDY]["context_window"] == CONTEXT_LENGTH  # config.json's
    assert by_id[SAMPLED]["context_window"] == 512  # the YAML's context_length


async def test_generation_config_fills_what_the_request_leaves_out(
    sdk: openai.AsyncOpenAI,
) -> None:
    first = await sdk.chat.completions.create(model=GREEDY, messages=ASK)
    second = await sdk.chat.completions.create(model=GREEDY, messages=ASK)
    explicit = await sdk.chat.completions.create(
        model=GREEDY, messages=ASK, temperature=0, max_tokens=5
    )
    # do_sample false: greedy; max_new_tokens 5: the budget.
    assert first.usage is not None and first.usage.completion_tokens == 5
    assert first.choices[0].finish_reason == "length"
    text = first.choices[0].message.content
    assert text and text == second.choices[0].message.content == explicit.choices[0].message.content
    # The request's own fields still win.
    longer = await sdk.chat.completions.create(model=GREEDY, messages=ASK, max_tokens=9)
    assert longer.usage is not None and longer.usage.completion_tokens == 9


async def test_yaml_keys_win_over_generation_config(sdk: openai.AsyncOpenAI) -> None:
    greedy = await sdk.chat.completions.create(model=SAMPLED, messages=ASK, temperature=0)
    assert greedy.usage is not None and greedy.usage.completion_tokens == 7  # YAML max_tokens
    texts = set()
    for seed in (1, 2, 3):
        reply = await sdk.chat.completions.create(model=SAMPLED, messages=ASK, seed=seed)
        texts.add(reply.choices[0].message.content)
    # YAML temperature 1.0 (not generation_config's greedy): seeds give different text.
    assert len(texts) > 1
    again = await sdk.chat.completions.create(model=SAMPLED, messages=ASK, seed=1)
    assert again.choices[0].message.content in texts


async def test_context_window_once_loaded(http: httpx.AsyncClient) -> None:
    model = (await http.get(f"/v1/models/{GREEDY}")).json()
    assert model["state"] == "ready"
    assert model["context_window"] == CONTEXT_LENGTH
