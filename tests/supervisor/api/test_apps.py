"""Keys as apps (``server.keys``), through a real gateway (fake workers over real
ZeroMQ) with the official ``openai``, ``anthropic`` and ``ollama`` clients: a scoped
key sees and reaches only its models, a read-only key lists but cannot generate,
limits answer 429 with ``Retry-After`` while other apps go on."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

from mlx_gateway.supervisor.config.apps import KeyConfig

from ..live import LiveGateway

OPEN = "chat-a"  # in the guest's scope
HIDDEN = "secret-b"  # outside it
MODELS = (
    {"model_path": "a/fake/ok", "served_model_name": OPEN},
    {"model_path": "b/fake/ok", "served_model_name": HIDDEN, "aliases": ["hidden-alias"]},
)
APPS = [
    KeyConfig(name="guest", key="sk-guest", models=["chat-*"]),
    KeyConfig(name="viewer", key="sk-viewer", role="read-only"),
    KeyConfig(name="chatty", key="sk-chatty", requests_per_minute=2),
    KeyConfig(name="wordy", key="sk-wordy", tokens_per_minute=5),
    KeyConfig(name="single", key="sk-single", max_concurrent=1),
    KeyConfig(name="ops", key="sk-ops", role="admin"),
]
SHORT = "sk-short"  # an api_keys entry beside them


@pytest.fixture(scope="module")
def gateway() -> Iterator[LiveGateway]:
    with LiveGateway(*MODELS, keys=APPS, api_keys=[SHORT]) as gw:
        yield gw


def oa(gw: LiveGateway, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0, timeout=30)


def ol(gw: LiveGateway, key: str) -> ollama.Client:
    return ollama.Client(host=gw.url, headers={"Authorization": f"Bearer {key}"})


def chat(client: openai.OpenAI, model: str, text: str = "hello there") -> Any:
    return client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}], max_tokens=8
    )


# ------------------------------------------------------------------ scopes


def test_scoped_key_lists_only_its_models(gateway: LiveGateway) -> None:
    assert [m.id for m in oa(gateway, "sk-guest").models.list()] == [OPEN]
    assert {m.id for m in oa(gateway, SHORT).models.list()} == {OPEN, HIDDEN}
    tags = ol(gateway, "sk-guest").list()
    assert [m.model for m in tags.models] == [f"{OPEN}:latest"]
    with anthropic.Anthropic(base_url=gateway.url, api_key="sk-guest", max_retries=0) as claude:
        assert [m.id for m in claude.models.list()] == [OPEN]


def test_scoped_key_reaches_only_its_models(gateway: LiveGateway) -> None:
    guest = oa(gateway, "sk-guest")
    assert chat(guest, OPEN).choices[0].message.content
    for name in (HIDDEN, "hidden-alias", "b/fake/ok"):
        with pytest.raises(openai.NotFoundError) as hidden:
            chat(guest, name)
        with pytest.raises(openai.NotFoundError) as missing:
            chat(guest, "no-such-model")
        # the same answer as for a model that does not exist, naming only its own
        assert hidden.value.body == {
            **missing.value.body,  # type: ignore[dict-item]
            "message": missing.value.body["message"].replace("no-such-model", name),  # type: ignore[index]
        }
        assert hidden.value.message.endswith(f"Served models: {OPEN}.")
        with pytest.raises(openai.NotFoundError):
            guest.models.retrieve(name)
    with pytest.raises(ollama.ResponseError) as by_ollama:
        ol(gateway, "sk-guest").chat(model=HIDDEN, messages=[{"role": "user", "content": "hi"}])
    assert by_ollama.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as shown:
        ol(gateway, "sk-guest").show(HIDDEN)
    assert shown.value.status_code == 404
    claude = anthropic.Anthropic(base_url=gateway.url, api_key="sk-guest", max_retries=0)
    with claude, pytest.raises(anthropic.NotFoundError):
        claude.messages.create(
            model=HIDDEN, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
        )
    # the model is there for a key that may use it
    assert chat(oa(gateway, SHORT), HIDDEN).choices[0].message.content


def test_ps_lists_only_the_keys_models(gateway: LiveGateway) -> None:
    chat(oa(gateway, SHORT), HIDDEN)  # both loaded
    chat(oa(gateway, SHORT), OPEN)
    loaded = {f"{OPEN}:latest", f"{HIDDEN}:latest"}
    assert {m.model for m in ol(gateway, SHORT).ps().models} == loaded
    assert [m.model for m in ol(gateway, "sk-guest").ps().models] == [f"{OPEN}:latest"]


# ------------------------------------------------------------------ roles


def test_read_only_key_lists_but_cannot_generate(gateway: LiveGateway) -> None:
    viewer = oa(gateway, "sk-viewer")
    assert {m.id for m in viewer.models.list()} == {OPEN, HIDDEN}
    assert viewer.models.retrieve(OPEN).id == OPEN
    with pytest.raises(openai.PermissionDeniedError) as refused:
        chat(viewer, OPEN)
    assert refused.value.code == "read_only_key"
    assert "'viewer'" in refused.value.message
    with pytest.raises(openai.PermissionDeniedError):
        viewer.embeddings.create(model=OPEN, input="x")
    client = ol(gateway, "sk-viewer")
    assert client.list().models and client.show(OPEN) is not None
    with pytest.raises(ollama.ResponseError) as by_ollama:
        client.chat(model=OPEN, messages=[{"role": "user", "content": "hi"}])
    assert by_ollama.value.status_code == 403
    # nor the admin endpoints
    answer = httpx.get(f"{gateway.url}/metrics", headers={"Authorization": "Bearer sk-viewer"})
    assert answer.status_code == 403


def test_admin_endpoints_take_only_admin_apps(gateway: LiveGateway) -> None:
    def metrics(key: str) -> int:
        headers = {"Authorization": f"Bearer {key}"}
        return httpx.get(f"{gateway.url}/metrics", headers=headers).status_code

    assert metrics("sk-ops") == 200
    assert metrics("sk-guest") == 403 and metrics(SHORT) == 403
    assert metrics("sk-nobody") == 401


def test_unknown_key_is_refused(gateway: LiveGateway) -> None:
    with pytest.raises(openai.AuthenticationError):
        oa(gateway, "sk-nobody").models.list()


# ------------------------------------------------------------------ limits


def test_requests_per_minute(gateway: LiveGateway) -> None:
    chatty = oa(gateway, "sk-chatty")
    chat(chatty, OPEN)
    chat(chatty, OPEN)
    assert [m.id for m in chatty.models.list()]  # listing is no generating request
    with pytest.raises(openai.RateLimitError) as limited:
        chat(chatty, OPEN)
    error = limited.value
    assert error.code == "app_limit_exceeded"
    assert error.body["param"] == "requests_per_minute"  # type: ignore[index]
    assert "requests_per_minute" in error.message and "'chatty'" in error.message
    assert 1 <= int(error.response.headers["retry-after"]) <= 60
    with pytest.raises(ollama.ResponseError) as by_ollama:
        ol(gateway, "sk-chatty").chat(model=OPEN, messages=[{"role": "user", "content": "hi"}])
    assert by_ollama.value.status_code == 429
    # the other apps go on
    assert chat(oa(gateway, "sk-guest"), OPEN).choices[0].message.content
    assert ol(gateway, SHORT).chat(model=OPEN, messages=[{"role": "user", "content": "hi"}])


def test_tokens_per_minute_counts_the_answers_tokens(gateway: LiveGateway) -> None:
    wordy = oa(gateway, "sk-wordy")
    first = chat(wordy, OPEN, "one two three four five six")  # 6 + 6 tokens > 5
    assert first.usage is not None and first.usage.total_tokens > 5
    with pytest.raises(openai.RateLimitError) as limited:
        chat(wordy, OPEN, "again")
    assert limited.value.body["param"] == "tokens_per_minute"  # type: ignore[index]
    assert 1 <= int(limited.value.response.headers["retry-after"]) <= 60
    assert chat(oa(gateway, "sk-guest"), OPEN).choices[0].message.content


def test_max_concurrent(gateway: LiveGateway) -> None:
    single = oa(gateway, "sk-single")
    chat(single, OPEN)  # the worker is up
    answers: list[Any] = []
    slow = threading.Thread(target=lambda: answers.append(chat(single, OPEN, "prefill 1.5 a b")))
    slow.start()
    try:
        deadline = time.monotonic() + 10
        while gateway.registry.resolve(OPEN).inflight == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(openai.RateLimitError) as limited:
            chat(single, OPEN)
        assert limited.value.body["param"] == "max_concurrent"  # type: ignore[index]
        assert limited.value.response.headers["retry-after"] == "1"
        assert chat(oa(gateway, "sk-guest"), OPEN).choices[0].message.content
    finally:
        slow.join(30)
    assert answers and answers[0].choices[0].message.content
    assert chat(single, OPEN).choices[0].message.content  # its slot is free again


# ------------------------------------------------------------------ realtime


def realtime(gw: LiveGateway, key: str, model: str) -> dict[str, Any]:
    """The first event of a Realtime session opened with ``key`` for ``model``."""
    url = f"ws://127.0.0.1:{gw.port}/v1/realtime?model={model}"
    headers = {"Authorization": f"Bearer {key}"}
    with ws_connect(url, additional_headers=headers, open_timeout=10) as ws:
        return json.loads(ws.recv(timeout=10))


def test_realtime_obeys_the_scope_and_the_role(gateway: LiveGateway) -> None:
    assert realtime(gateway, "sk-guest", OPEN)["type"] == "session.created"
    refused = realtime(gateway, "sk-guest", HIDDEN)
    assert refused["type"] == "error" and refused["error"]["code"] == "model_not_found"
    assert realtime(gateway, SHORT, HIDDEN)["type"] == "session.created"
    with pytest.raises(InvalidStatus) as read_only:
        realtime(gateway, "sk-viewer", OPEN)
    assert read_only.value.response.status_code == 403
