"""Every name any list shows is taken by every surface that takes a model name
(issue 41, item 5): apps copy a name from whichever list they read (``/v1/models``,
its ``aliases``, Anthropic's model list, Ollama's ``/api/tags`` and ``/api/ps``)
and send it to any API. The real app and registry, fake language models over real
ZeroMQ (one served from the Ollama library as ``smolgguf``, listed by ``/api/tags``
as ``smolgguf:latest``), a real embeddings worker on a tiny BERT, and the official
``openai``, ``anthropic`` and ``ollama`` clients."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import ollama
import openai
import pytest
import pytest_asyncio
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry

from .test_anthropic_api import client_for
from .test_embeddings import command

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

SMOL = "smolgguf"  # from Ollama's library: model_path ollama:smolgguf:latest
TAGGED = "qwen3:4b"  # a name with a tag of its own
HELPER = "lab/fake/ok"  # a served name with a mixed-case alias
BERT = "MiniLM"  # an embeddings model
TEXT = (SMOL, TAGGED, HELPER)
MESSAGES: Any = [{"role": "user", "content": "hello there"}]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def app(tiny_bert_path: Path) -> AsyncIterator[Starlette]:
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=1.0),
        models=[
            model_entry(
                model_path=f"ollama:{SMOL}:latest", served_model_name=SMOL, source="ollama"
            ),
            model_entry(model_path="tag/fake/ok", served_model_name=TAGGED),
            model_entry(model_path=HELPER, served_model_name=HELPER, aliases=["Helper"]),
            model_entry(
                model_path=str(tiny_bert_path), served_model_name=BERT, model_type="embeddings"
            ),
        ],
    )
    app = create_app(config, command=command)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
def claude(app: Starlette) -> anthropic.AsyncAnthropic:
    return client_for(app)


@pytest.fixture
def claude_lists(app: Starlette) -> anthropic.AsyncAnthropic:
    """For ``models.list`` only, not validating: ``/v1/models`` answers OpenAI's model
    objects, which lack the ``created_at`` and ``display_name`` of Anthropic's (the
    ids read the same)."""
    transport = httpx2.ASGITransport(app)
    return anthropic.AsyncAnthropic(
        base_url="http://gw",
        api_key="unused",
        http_client=httpx2.AsyncClient(transport=transport, base_url="http://gw"),
        max_retries=0,
    )


@pytest.fixture
def llama(app: Starlette) -> ollama.AsyncClient:
    return ollama.AsyncClient(host="http://gw", transport=httpx.ASGITransport(app), timeout=60)


NAMES = {SMOL: {SMOL}, TAGGED: {TAGGED}, HELPER: {HELPER, "helper"}, BERT: {"minilm"}}
"""Each model's names, written in lower case without ``:latest``."""


def model_of(name: str) -> str:
    """The served name a listed name stands for (by the test's own reading)."""
    plain = name.removesuffix(":latest").lower()
    [served] = [model for model, names in NAMES.items() if plain in names]
    return served


Call = Callable[[str], Awaitable[object]]


class Refused(Exception):
    """A plain HTTP call's error answer."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(status_code, message)
        self.status_code, self.message = status_code, message


def text_surfaces(
    sdk: openai.AsyncOpenAI,
    claude: anthropic.AsyncAnthropic,
    llama: ollama.AsyncClient,
    http: httpx.AsyncClient,
) -> dict[str, Call]:
    async def raw(path: str, body: dict[str, Any]) -> object:
        response = await http.post(path, json=body)
        if response.status_code != 200:
            raise Refused(response.status_code, response.text)
        return response.json()

    return {
        "chat completions": lambda m: sdk.chat.completions.create(
            model=m, messages=MESSAGES, max_tokens=4
        ),
        "chat input_tokens": lambda m: raw(
            "/v1/chat/completions/input_tokens", {"model": m, "messages": MESSAGES}
        ),
        "completions": lambda m: sdk.completions.create(model=m, prompt="hi", max_tokens=4),
        "responses": lambda m: sdk.responses.create(model=m, input="hi", max_output_tokens=4),
        "responses input_tokens": lambda m: raw(
            "/v1/responses/input_tokens", {"model": m, "input": "hi"}
        ),
        "anthropic messages": lambda m: claude.messages.create(
            model=m, messages=MESSAGES, max_tokens=4
        ),
        "anthropic count_tokens": lambda m: claude.messages.count_tokens(
            model=m, messages=MESSAGES
        ),
        "ollama chat": lambda m: llama.chat(model=m, messages=MESSAGES),
        "ollama generate": lambda m: llama.generate(model=m, prompt="hi"),
        "ollama show": lambda m: llama.show(m),
        "tokenize": lambda m: raw("/tokenize", {"model": m, "content": "one two"}),
        "model retrieve": lambda m: sdk.models.retrieve(m),
        "model fit": lambda m: sdk.get(f"/models/{m}/fit", cast_to=httpx.Response),
    }


def embedding_surfaces(sdk: openai.AsyncOpenAI, llama: ollama.AsyncClient) -> dict[str, Call]:
    return {
        "embeddings": lambda m: sdk.embeddings.create(model=m, input="hi", encoding_format="float"),
        "ollama embed": lambda m: llama.embed(model=m, input="hi"),
        "ollama embeddings": lambda m: llama.embeddings(model=m, prompt="hi"),
        "ollama show": lambda m: llama.show(m),
        "model retrieve": lambda m: sdk.models.retrieve(m),
    }


async def every_list(
    sdk: openai.AsyncOpenAI,
    claude: anthropic.AsyncAnthropic,
    llama: ollama.AsyncClient,
    http: httpx.AsyncClient,
) -> dict[str, set[str]]:
    """Each list's names (the UI's model list is ``/v1/models``)."""
    models = (await http.get("/v1/models")).json()["data"]
    return {
        "/v1/models": {m.id async for m in sdk.models.list()},
        "/v1/models aliases": {a for m in models for a in m["aliases"]},
        "anthropic models": {m.id async for m in claude.models.list()},
        "/api/tags": {m.model for m in (await llama.list()).models if m.model},
        "/api/ps": {m.model for m in (await llama.ps()).models if m.model},
    }


async def test_every_listed_name_is_taken_by_every_surface(
    sdk: openai.AsyncOpenAI,
    claude: anthropic.AsyncAnthropic,
    claude_lists: anthropic.AsyncAnthropic,
    llama: ollama.AsyncClient,
    http: httpx.AsyncClient,
) -> None:
    lists = await every_list(sdk, claude_lists, llama, http)
    assert lists["/v1/models"] == {*TEXT, BERT}
    assert f"{SMOL}:latest" in lists["/api/tags"] and "Helper:latest" in lists["/api/tags"]
    text = text_surfaces(sdk, claude, llama, http)
    embedding = embedding_surfaces(sdk, llama)
    # Once more after every model answered, so /api/ps lists them all.
    for _ in range(2):
        failures = []
        names = {(where, name) for where, listed in lists.items() for name in listed}
        for where, name in sorted(names):
            served = model_of(name)
            surfaces = embedding if served == BERT else text
            for surface, call in surfaces.items():
                try:
                    await call(name)
                except (openai.APIStatusError, anthropic.APIStatusError, Refused) as exc:
                    failures.append((where, name, surface, exc.status_code, exc.message))
                except ollama.ResponseError as exc:
                    failures.append((where, name, surface, exc.status_code, exc.error))
        assert not failures
        lists = await every_list(sdk, claude_lists, llama, http)
    assert lists["/api/ps"] == {f"{m}:latest" for m in (SMOL, HELPER, BERT)} | {TAGGED}


async def test_the_latest_tag_and_case_through_the_clients(
    sdk: openai.AsyncOpenAI, claude: anthropic.AsyncAnthropic, llama: ollama.AsyncClient
) -> None:
    # The case: /api/tags lists smolgguf:latest; every API takes it, and
    # Ollama's clients may also write the name in another case.
    for name in (f"{SMOL}:latest", "SmolGGUF", "SMOLGGUF:LATEST"):
        reply = await llama.chat(model=name, messages=MESSAGES, options={"num_predict": 2})
        assert reply.message.content == "hello there "
        answer = await sdk.chat.completions.create(model=name, messages=MESSAGES)
        assert answer.model == SMOL and answer.choices[0].message.content == "hello there "
        message = await claude.messages.create(model=name, messages=MESSAGES, max_tokens=8)
        assert message.content[0].type == "text"
    # A name served with another tag is another model: the 404 still names the
    # model asked for and lists the served ones (Ollama's in its listed form).
    with pytest.raises(openai.NotFoundError) as info:
        await sdk.chat.completions.create(model=f"{SMOL}:7b", messages=MESSAGES)
    assert f"'{SMOL}:7b'" in info.value.message and f"{SMOL}, {TAGGED}" in info.value.message
    with pytest.raises(ollama.ResponseError) as missing:
        await llama.chat(model="qwen3", messages=MESSAGES)
    assert missing.value.status_code == 404
    assert "'qwen3'" in missing.value.error and f"{SMOL}:latest, {TAGGED}" in missing.value.error
