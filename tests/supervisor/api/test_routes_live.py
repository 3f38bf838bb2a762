"""Routes against a real gateway with fake workers (the real protocol over real
ZeroMQ), driven by the official ``openai`` and ``ollama`` clients: a fallback
route answers from its next model when one fails to load or fails before its
first byte, and not after it; spillover moves load off a full queue; warm picks
the loaded model; a session sticks to one model; routes are listed; the answer
and the ``x-mlx-gateway-model`` header name the model that served."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import msgspec
import ollama
import openai
import pytest

from mlx_gateway.supervisor.config import load_config
from mlx_gateway.supervisor.config.apps import KeyConfig
from mlx_gateway.supervisor.config.routes import RouteConfig
from mlx_gateway.supervisor.reload import reload_from
from tests.supervisor.fakes import fake_config
from tests.supervisor.live import LiveGateway

pytestmark = pytest.mark.timeout(120)

MODELS: list[dict[str, Any]] = [
    {"model_path": "fake/load-error", "served_model_name": "down"},
    {"model_path": "fake/error-first", "served_model_name": "broken"},
    {"model_path": "fake/a/ok", "served_model_name": "first"},
    {"model_path": "fake/b/ok", "served_model_name": "second"},
    {
        "model_path": "fake/c/ok",
        "served_model_name": "narrow",
        "max_concurrency": 1,
        "max_queue": 0,
    },
    {"model_path": "fake/d/ok", "served_model_name": "cold"},
    {"model_path": "fake/e/ok", "served_model_name": "hot"},
    {
        "model_path": "fake/error-first",
        "served_model_name": "embed-broken",
        "model_type": "embeddings",
    },
    {"model_path": "fake/f/ok", "served_model_name": "embed-ok", "model_type": "embeddings"},
]
ROUTES = [
    RouteConfig(name="chat", strategy="fallback", models=("down", "first", "second")),
    RouteConfig(name="flaky", strategy="fallback", models=("broken", "second")),
    RouteConfig(name="sticky", strategy="fallback", models=("first", "second")),
    RouteConfig(name="spill", strategy="spillover", models=("narrow", "second")),
    RouteConfig(name="warmest", strategy="warm", models=("cold", "hot")),
    RouteConfig(name="vectors", strategy="fallback", models=("embed-broken", "embed-ok")),
]
HEADER = "x-mlx-gateway-model"


@pytest.fixture(scope="module")
def gateway() -> Iterator[LiveGateway]:
    config = msgspec.structs.replace(fake_config(*MODELS), routes=ROUTES)
    with LiveGateway(config=config) as gw:
        yield gw


@pytest.fixture(scope="module")
def client(gateway: LiveGateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="-", max_retries=0) as made:
        yield made


def ask(client: openai.OpenAI, model: str, text: str = "hello there", **extra: Any) -> Any:
    messages: Any = [{"role": "user", "content": text}]
    return client.chat.completions.with_raw_response.create(model=model, messages=messages, **extra)


def test_a_fallback_route_answers_from_its_next_model_while_the_first_fails_to_load(
    client: openai.OpenAI,
) -> None:
    raw = ask(client, "chat")
    answer = raw.parse()
    assert answer.model == "first" and raw.headers[HEADER] == "first"
    assert answer.choices[0].message.content.strip() == "hello there"
    again = ask(client, "chat").parse()  # the failed model is in its backoff: still first
    assert again.model == "first"


def test_a_streamed_fallback_names_the_model_in_every_chunk(client: openai.OpenAI) -> None:
    messages: Any = [{"role": "user", "content": "one two"}]
    stream = client.chat.completions.create(model="chat", messages=messages, stream=True)
    chunks = list(stream)
    assert {c.model for c in chunks} == {"first"}
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.split() == ["one", "two"]


def test_a_failure_before_the_first_byte_falls_back(client: openai.OpenAI) -> None:
    raw = ask(client, "flaky")
    assert raw.parse().model == "second" and raw.headers[HEADER] == "second"


def test_a_failure_after_the_first_byte_ends_the_stream(
    client: openai.OpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    messages: Any = [{"role": "user", "content": "crash now please"}]
    served: set[str] = set()
    with pytest.raises(openai.APIError):
        for chunk in client.chat.completions.create(model="sticky", messages=messages, stream=True):
            served.add(chunk.model)
    assert served == {"first"}  # it began on the first model, and ended there
    assert not [r for r in caplog.records if "route sticky" in r.getMessage()]  # no fallback


def test_spillover_moves_load_off_a_full_queue(client: openai.OpenAI, gateway: LiveGateway) -> None:
    narrow = gateway.registry.resolve("narrow")
    body = {"model": "spill", "stream": True, "messages": [{"role": "user", "content": "hang"}]}
    with (
        httpx.Client(base_url=gateway.url, timeout=30) as http,
        http.stream("POST", "/v1/chat/completions", json=body) as held,
    ):
        assert held.status_code == 200 and held.headers[HEADER] == "narrow"
        assert narrow.inflight == 1  # its one slot taken, no queue: full
        raw = ask(client, "spill")
        assert raw.parse().model == "second" and raw.headers[HEADER] == "second"
    free = ask(client, "spill", "after").parse()  # the slot is free again
    assert free.model == "narrow"


def test_warm_picks_the_loaded_model(client: openai.OpenAI, gateway: LiveGateway) -> None:
    gateway.run(gateway.registry.load("hot"))
    raw = ask(client, "warmest")
    assert raw.parse().model == "hot" and raw.headers[HEADER] == "hot"
    assert gateway.registry.resolve("cold").status().state != "ready"


def test_a_session_sticks_to_its_model(client: openai.OpenAI, gateway: LiveGateway) -> None:
    narrow = gateway.registry.resolve("narrow")
    body = {"model": "narrow", "stream": True, "messages": [{"role": "user", "content": "hang"}]}
    with (
        httpx.Client(base_url=gateway.url, timeout=30) as http,
        http.stream("POST", "/v1/chat/completions", json=body) as held,
    ):
        assert held.status_code == 200 and narrow.inflight == 1
        # narrow is full: these sessions spill to second, which they stay on
        assert ask(client, "spill", user="ann").parse().model == "second"
        spilled = ask(client, "spill", extra_body={"prompt_cache_key": "k1"}).parse()
        assert spilled.model == "second"
    assert ask(client, "spill", user="ann").parse().model == "second"
    assert ask(client, "spill", extra_body={"prompt_cache_key": "k1"}).parse().model == "second"
    assert ask(client, "spill", user="bob").parse().model == "narrow"  # no session yet
    # through the Responses API too: its user is the same session
    answer = client.responses.create(model="spill", input="hi", user="ann")
    assert answer.model == "second"


def test_routes_are_listed(client: openai.OpenAI, gateway: LiveGateway) -> None:
    listed = {m.id: m for m in client.models.list()}
    assert {"chat", "flaky", "sticky", "spill", "warmest"} <= set(listed)
    chat = listed["chat"].model_dump()
    assert chat["route"] == {"strategy": "fallback", "models": ["down", "first", "second"]}
    one = client.models.retrieve("spill").model_dump()
    assert one["route"]["strategy"] == "spillover"


def test_ollama_lists_and_chats_through_a_route(gateway: LiveGateway) -> None:
    with ollama.Client(host=gateway.url, timeout=60) as made:
        names = [m.model for m in made.list().models]
        assert "chat:latest" in names
        reply = made.chat(model="chat", messages=[{"role": "user", "content": "say hi"}])
        assert reply.message.content == "hi"
        assert made.show("chat:latest").modelfile == "FROM fake/load-error\n"  # its first model
        with pytest.raises(ollama.ResponseError) as info:  # a copy takes a model only
            made.copy("chat", "chat-copy")
        assert info.value.status_code == 400 and "'chat' is a route" in info.value.error


def test_a_route_where_only_a_model_serves_is_a_clear_400(gateway: LiveGateway) -> None:
    reply = httpx.post(
        f"{gateway.url}/v1/images/generations", json={"model": "chat", "prompt": "a cat"}
    )
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == "route_not_supported" and "'chat' is a route" in error["message"]


CONFIG = """\
server: {{shutdown_grace: 1}}
models:
  - {{model_path: fake/ok, served_model_name: a}}
  - {{model_path: fake/ok, served_model_name: b}}
routes:
  - {{name: r, strategy: {strategy}, models: [{members}]}}
"""


def test_a_reload_picks_up_changed_routes(tmp_path: Any) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG.format(strategy="fallback", members="a, b"))
    with (
        LiveGateway(config=load_config(path)) as gw,
        openai.OpenAI(base_url=f"{gw.url}/v1", api_key="-", max_retries=0) as client,
    ):
        assert ask(client, "r").parse().model == "a"
        path.write_text(
            CONFIG.format(strategy="warm", members="b") + "  - {name: s, models: [a]}\n"
        )
        report = gw.run(reload_from(str(path), gw.app))
        assert report is not None and report["kept"] == ["a", "b"]
        assert ask(client, "r").parse().model == "b"
        listed = {m.id: m.model_dump() for m in client.models.list()}
        assert listed["r"]["route"] == {"strategy": "warm", "models": ["b"]}
        assert ask(client, "s").parse().model == "a"
        path.write_text(CONFIG.format(strategy="warm", members="r"))  # refused: a route
        assert gw.run(reload_from(str(path), gw.app)) is None
        assert ask(client, "s").parse().model == "a"  # the running routes stay


def test_an_embeddings_route_falls_back_too(gateway: LiveGateway) -> None:
    with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="-", max_retries=0) as client:
        raw = client.embeddings.with_raw_response.create(
            model="vectors", input=["one two", "three"]
        )
    answer = raw.parse()
    assert answer.model == "embed-ok" and raw.headers[HEADER] == "embed-ok"
    assert [row.embedding for row in answer.data] == [[2.0, 1.0], [1.0, 1.0]]
    with ollama.Client(host=gateway.url, timeout=60) as made:
        assert made.embed(model="vectors", input="a b c").embeddings == [[3.0, 1.0]]


@pytest.mark.parametrize("surface", ["anthropic", "completions", "ollama generate"])
def test_every_text_surface_falls_back(gateway: LiveGateway, surface: str) -> None:
    if surface == "anthropic":
        with anthropic.Anthropic(base_url=gateway.url, api_key="-", max_retries=0) as claude:
            message = claude.messages.create(
                model="flaky",
                max_tokens=16,
                messages=[{"role": "user", "content": "say hi"}],
                metadata={"user_id": "carol"},
            )
        assert message.model == "second" and message.content[0].text == "hi"  # type: ignore[union-attr]
    elif surface == "completions":
        with openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="-", max_retries=0) as client:
            raw = client.completions.with_raw_response.create(model="flaky", prompt="say hi")
        assert raw.parse().model == "second" and raw.headers[HEADER] == "second"
    else:
        reply = httpx.post(
            f"{gateway.url}/api/generate",
            json={"model": "flaky", "prompt": "say hi", "stream": False},
            timeout=30,
        )
        assert reply.status_code == 200 and reply.headers[HEADER] == "second"
        assert reply.json()["response"] == "hi"


def test_an_unknown_name_is_a_404_listing_the_routes_too(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        ask(client, "nothing-here")
    assert "Served models:" in info.value.message and "warmest" in info.value.message


def test_a_model_over_the_memory_budget_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    gb = 1024**3
    models = [
        {"model_path": "huge/ok", "served_model_name": "huge", "memory_estimate": 10 * gb},
        {"model_path": "small/ok", "served_model_name": "small", "memory_estimate": gb},
    ]
    config = fake_config(*models, memory_budget="2GB")
    route = RouteConfig(name="fits", models=("huge", "small"))
    with (
        LiveGateway(config=msgspec.structs.replace(config, routes=[route])) as gw,
        openai.OpenAI(base_url=f"{gw.url}/v1", api_key="-", max_retries=0) as client,
    ):
        raw = ask(client, "fits")
        assert raw.parse().model == "small" and raw.headers[HEADER] == "small"
    (moved,) = [r.getMessage() for r in caplog.records if "route fits" in r.getMessage()]
    assert "huge could not answer" in moved and "memory_budget" in moved, moved


def test_a_route_obeys_the_key_scope() -> None:
    """A key scoped to a route lists and uses it (its models through it, though it
    may not name them); a key scoped elsewhere neither lists nor reaches it."""
    apps = [
        KeyConfig(name="router", key="sk-router", models=["sticky"]),
        KeyConfig(name="other", key="sk-other", models=["hot"]),
    ]
    config = fake_config(*MODELS, keys=apps)
    config = msgspec.structs.replace(config, routes=ROUTES)
    with LiveGateway(config=config) as gw:
        with openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-router", max_retries=0) as sdk:
            assert [m.id for m in sdk.models.list()] == ["sticky"]
            raw = ask(sdk, "sticky")
            assert raw.headers[HEADER] in ("first", "second")
            with pytest.raises(openai.NotFoundError):
                ask(sdk, "first")
        with openai.OpenAI(base_url=f"{gw.url}/v1", api_key="sk-other", max_retries=0) as sdk:
            assert [m.id for m in sdk.models.list()] == ["hot"]
            with pytest.raises(openai.NotFoundError) as refused:
                ask(sdk, "sticky")
            assert "sticky" not in str(refused.value.body).replace("'sticky'", "")
        tags = ollama.Client(host=gw.url, headers={"Authorization": "Bearer sk-other"}).list()
        assert [m.model for m in tags.models] == ["hot:latest"]
