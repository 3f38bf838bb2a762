"""Ollama's API on real workers (a tiny random llama, a tiny BERT) in a whole
``mlx-gateway`` process, driven by the official ``ollama`` Python client: chat and
generate streamed and not, the grammar behind ``format``, embeddings, ``ps``,
``keep_alive: 0``, pulling from a local stand-in for the hub and deleting, a
pulled model across a restart, and Home Assistant's sequence."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import httpx
import ollama
import pytest

from tests.e2e.gateway import Gateway, wait_until

from .conftest import PULLABLE, Connect, Lab

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "HassTurnOn",
        "description": "Turns on a device",
        "parameters": {
            "type": "object",
            "properties": {"name": {"type": "string"}},
            "required": ["name"],
        },
    },
}


ClientFor = Callable[[Gateway], ollama.Client]


@pytest.fixture
def client(connect: Connect) -> ClientFor:
    """``client(gateway)``: the Python client aimed at that gateway."""
    return lambda gw: connect(gw.base_url)


def state_of(gw: Gateway, name: str) -> str:
    return str(gw.model(name)["state"])


def test_chat_and_generate(gateway: Gateway, client: ClientFor) -> None:
    c = client(gateway)
    messages = [{"role": "user", "content": "Hello"}]
    reply = c.chat(model="tiny", messages=messages, options={"num_predict": 6, "seed": 1})
    assert reply.done and reply.done_reason in ("stop", "length")
    assert reply.eval_count and 0 < reply.eval_count <= 6
    assert reply.prompt_eval_count and reply.prompt_eval_count > 1
    assert reply.total_duration and reply.eval_duration is not None
    parts = list(
        c.chat(model="tiny:latest", messages=messages, stream=True, options={"num_predict": 6})
    )
    assert parts[-1].done and not any(p.done for p in parts[:-1])
    streamed = "".join(p.message.content or "" for p in parts)
    assert parts[-1].eval_count and (streamed or parts[-1].eval_count <= 6)
    generated = c.generate(model="tiny", prompt="Once", options={"num_predict": 4})
    assert generated.done and generated.eval_count and generated.eval_count <= 4


def test_format_schema_is_enforced(gateway: Gateway, client: ClientFor) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 8}, "n": {"type": "integer"}},
        "required": ["city", "n"],
        "additionalProperties": False,
    }
    reply = client(gateway).chat(
        model="tiny",
        messages=[{"role": "user", "content": "A city?"}],
        format=schema,
        options={"num_predict": 64, "temperature": 0},
    )
    value = json.loads(reply.message.content or "")  # a random model: only the grammar
    assert set(value) == {"city", "n"} and isinstance(value["n"], int)


def test_embed(gateway: Gateway, client: ClientFor) -> None:
    c = client(gateway)
    result = c.embed(model="minilm", input=["first text", "second text"])
    assert len(result.embeddings) == 2 and len(result.embeddings[0]) == len(result.embeddings[1])
    assert result.prompt_eval_count
    single = c.embeddings(model="minilm", prompt="first text")
    assert single.embedding == pytest.approx(result.embeddings[0], abs=1e-5)
    with pytest.raises(ollama.ResponseError) as wrong:
        c.embed(model="tiny", input="x")
    assert wrong.value.status_code == 400 and "/api/chat" in wrong.value.error


def test_images_reach_a_vision_model(gateway: Gateway, client: ClientFor) -> None:
    from PIL import Image

    picture = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(picture, format="PNG")
    c = client(gateway)
    text = {"role": "user", "content": "What is this?"}
    plain = c.chat(model="eyes", messages=[text], options={"num_predict": 2})
    seen = c.chat(
        model="eyes",
        messages=[{**text, "images": [picture.getvalue()]}],  # the client sends base64
        options={"num_predict": 2},
    )
    assert seen.done and plain.prompt_eval_count and seen.prompt_eval_count
    assert seen.prompt_eval_count > plain.prompt_eval_count  # the image's tokens
    assert "vision" in (c.show("eyes").capabilities or [])
    with pytest.raises(ollama.ResponseError) as broken:
        c.chat(model="eyes", messages=[{**text, "images": ["bm90IGFuIGltYWdl"]}])
    assert broken.value.status_code == 400


def test_show_and_ps(gateway: Gateway, client: ClientFor) -> None:
    c = client(gateway)
    shown = c.show("tiny")
    assert shown.modelinfo is not None
    assert shown.modelinfo["llama.context_length"] == 2048
    assert "completion" in (shown.capabilities or [])
    assert "embedding" in (c.show("minilm").capabilities or [])
    c.chat(model="tiny", messages=[{"role": "user", "content": "hi"}], options={"num_predict": 2})
    loaded = {m.model: m for m in c.ps().models}
    assert loaded["tiny:latest"].size and loaded["tiny:latest"].context_length == 2048


def test_keep_alive_zero_unloads_the_real_worker(gateway: Gateway, client: ClientFor) -> None:
    c = client(gateway)
    c.chat(model="tiny", messages=[{"role": "user", "content": "hi"}], options={"num_predict": 2})
    assert state_of(gateway, "tiny") == "ready"
    c.chat(
        model="tiny",
        messages=[{"role": "user", "content": "bye"}],
        options={"num_predict": 2},
        keep_alive=0,
    )
    assert wait_until(lambda: state_of(gateway, "tiny") == "unloaded", 30)
    assert "tiny:latest" not in {m.model for m in c.ps().models}
    # Later requests without keep_alive keep the lifetime the client set.
    c.chat(model="tiny", messages=[{"role": "user", "content": "again"}], keep_alive="5m")


def test_a_failed_pull_leaves_nothing(gateway: Gateway, lab: Lab, client: ClientFor) -> None:
    c = client(gateway)
    before = {m.model for m in c.list().models}
    with pytest.raises(ollama.ResponseError) as missing:
        for _ in c.pull("mlx-community/does-not-exist", stream=True):
            pass
    assert "no such repo" in missing.value.error
    with pytest.raises(ollama.ResponseError) as bad:
        c.pull("no such name!")
    assert bad.value.status_code == 400 and "not an Ollama model name" in bad.value.error
    assert {m.model for m in c.list().models} == before
    pulled = lab.state / "pulled.json"
    assert not pulled.exists() or "does-not-exist" not in pulled.read_text()


def test_home_assistant_then_restart_then_delete(
    gateway: Gateway, lab: Lab, client: ClientFor
) -> None:
    """Home Assistant's Ollama integration: list the models, pull the configured one
    when it is missing (progress streamed), then chat with its tools, keep_alive -1
    and options.num_ctx on every request; a restart keeps the pulled model; deleting
    removes it and its files."""
    c = client(gateway)
    names = {m.model for m in c.list().models}
    assert f"{PULLABLE}:latest" not in names
    progress = list(c.pull(PULLABLE, stream=True))
    statuses = [p.status for p in progress]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
    files = [p for p in progress if p.total and p.completed == p.total]
    assert any((p.status or "").endswith("model.safetensors") for p in files)
    assert f"{PULLABLE}:latest" in {m.model for m in c.list().models}

    messages: list[Any] = [
        {"role": "system", "content": "You control a home."},
        {"role": "user", "content": "Turn on the kitchen light"},
    ]
    parts = list(
        c.chat(
            model=PULLABLE,
            messages=messages,
            tools=[WEATHER],
            stream=True,
            keep_alive=-1,
            options={"num_ctx": 8192, "num_predict": 8},
        )
    )
    assert parts[-1].done
    (entry,) = [m for m in c.ps().models if m.model == f"{PULLABLE}:latest"]
    assert entry.expires_at is not None and entry.expires_at.year > 2200
    assert gateway.model(PULLABLE)["keep_alive"] == -1

    gateway.stop()
    again = lab.start()
    try:
        c = client(again)
        assert f"{PULLABLE}:latest" in {m.model for m in c.list().models}
        reply = c.chat(
            model=f"{PULLABLE}:latest",
            messages=[{"role": "user", "content": "still here?"}],
            options={"num_predict": 3},
        )
        assert reply.done
        cached = lab.cache / f"models--{PULLABLE.replace('/', '--')}"
        assert cached.is_dir()
        with pytest.raises(ollama.ResponseError) as refused:
            c.delete("tiny")  # from the config file
        assert refused.value.status_code == 400 and "config file" in refused.value.error
        assert c.delete(PULLABLE).status == "success"
        assert f"{PULLABLE}:latest" not in {m.model for m in c.list().models}
        assert not cached.exists()
        assert json.loads((lab.state / "pulled.json").read_text())["models"] == {}
        with pytest.raises(ollama.ResponseError) as gone:
            c.chat(model=PULLABLE, messages=[{"role": "user", "content": "hi"}])
        assert gone.value.status_code == 404
    finally:
        again.stop()
    final = lab.start()
    try:
        names = {m.model for m in client(final).list().models}
        assert f"{PULLABLE}:latest" not in names and "tiny:latest" in names
        assert httpx.get(f"{final.base_url}/api/version").json()["version"]
    finally:
        final.stop()
