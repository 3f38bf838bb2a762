"""Ollama's native API driven by the official ``ollama`` Python client, unmodified,
over real TCP against the gateway app with fake workers (the real protocol; the
fake model writes what ``say <text>`` tells it, so a tool call or a thinking block
is scripted and the gateway's parsing is what is tested)."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import ollama
import pytest

from tests.e2e.gateway import wait_until
from tests.supervisor.api.lm_app import OK, PLAIN, REASONER, VISION, WEATHER_TOOL, hermes_call
from tests.supervisor.live import LiveGateway

from .conftest import Connect

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def gateway() -> Iterator[LiveGateway]:
    with LiveGateway(
        {
            "model_path": OK,
            "tool_call_parser": "hermes",
            "reasoning_parser": "think",
            "aliases": ["okay:7b"],
        },
        {"model_path": REASONER},
        {"model_path": PLAIN, "tool_call_parser": "none", "reasoning_parser": "none"},
        {"model_path": VISION, "model_type": "vlm"},
    ) as gw:
        yield gw


@pytest.fixture(scope="module")
def client(gateway: LiveGateway) -> Iterator[ollama.Client]:
    with ollama.Client(host=gateway.url, timeout=60) as made:
        yield made


def test_list_names_round_trip(client: ollama.Client) -> None:
    names = [m.model for m in client.list().models]
    assert f"{OK}:latest" in names and "okay:7b" in names and f"{PLAIN}:latest" in names
    for name in (f"{OK}:latest", "okay:7b"):  # each listed name works as it is
        reply = client.chat(model=name, messages=[{"role": "user", "content": "say hi"}])
        assert reply.message.content == "hi"
        assert reply.model == name


def test_chat_not_streamed(client: ollama.Client) -> None:
    reply = client.chat(model=PLAIN, messages=[{"role": "user", "content": "say Hello there"}])
    assert reply.done and reply.done_reason == "stop"
    assert reply.message.role == "assistant" and reply.message.content == "Hello there"
    assert reply.prompt_eval_count == 3 and reply.eval_count
    assert reply.total_duration and reply.total_duration >= (reply.eval_duration or 0)
    assert reply.created_at and reply.created_at.endswith("Z")


def test_chat_streamed(client: ollama.Client) -> None:
    parts = list(
        client.chat(
            model=PLAIN, messages=[{"role": "user", "content": "say Hello there"}], stream=True
        )
    )
    assert len(parts) > 2
    assert "".join(p.message.content or "" for p in parts) == "Hello there"
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    assert parts[-1].done_reason == "stop" and parts[-1].eval_count


def test_num_predict_cuts_the_answer(client: ollama.Client) -> None:
    reply = client.chat(
        model=PLAIN,
        messages=[{"role": "user", "content": "one two three four five six"}],
        options={"num_predict": 2, "num_ctx": 8192, "mirostat": 0},
    )
    assert reply.done_reason == "length"
    assert reply.eval_count == 2


def test_tool_call_round_trip(client: ollama.Client) -> None:
    call = hermes_call("get_weather", '{"city": "Graz"}')
    messages: list[Any] = [{"role": "user", "content": f"say {call}"}]
    reply = client.chat(model=OK, messages=messages, tools=[WEATHER_TOOL])
    (made,) = reply.message.tool_calls or []
    assert made.function.name == "get_weather"
    assert made.function.arguments == {"city": "Graz"}  # an object, as Ollama sends it
    messages += [
        reply.message,
        {"role": "tool", "tool_name": "get_weather", "content": "say Sunny in Graz"},
    ]
    follow = client.chat(model=OK, messages=messages, tools=[WEATHER_TOOL])
    assert follow.message.content == "Sunny in Graz"
    assert not follow.message.tool_calls


def test_tool_call_streamed(client: ollama.Client) -> None:
    call = hermes_call("get_weather", '{"city": "Graz"}')
    parts = list(
        client.chat(
            model=OK,
            messages=[{"role": "user", "content": f"say Checking. {call}"}],
            tools=[WEATHER_TOOL],
            stream=True,
        )
    )
    calls = [c for p in parts for c in p.message.tool_calls or []]
    assert [(c.function.name, c.function.arguments) for c in calls] == [
        ("get_weather", {"city": "Graz"})
    ]
    assert "".join(p.message.content or "" for p in parts).strip() == "Checking."


def test_thinking_comes_apart(client: ollama.Client) -> None:
    reply = client.chat(
        model=REASONER,
        messages=[{"role": "user", "content": "say Let me see.</think>Four."}],
        think=True,
    )
    assert reply.message.thinking == "Let me see."
    assert reply.message.content == "Four."


def test_generate(client: ollama.Client) -> None:
    reply = client.generate(model=PLAIN, prompt="say Once upon a time", system="Be brief.")
    assert reply.response == "Once upon a time" and reply.done
    streamed = list(client.generate(model=PLAIN, prompt="say Once upon a time", stream=True))
    assert "".join(p.response or "" for p in streamed) == "Once upon a time"
    raw = client.generate(model=PLAIN, prompt="say raw text", raw=True)
    assert raw.response == "raw text"


def test_generate_empty_prompt_loads(client: ollama.Client, gateway: LiveGateway) -> None:
    reply = client.generate(model=PLAIN, prompt="")
    assert reply.done and reply.done_reason == "load"
    assert gateway.registry.resolve(PLAIN).state.public == "ready"


def test_images_reach_a_vision_model(client: ollama.Client) -> None:
    from tests.supervisor.api.lm_app import PNG_1PX

    reply = client.chat(
        model=VISION,
        messages=[{"role": "user", "content": "say seen", "images": [PNG_1PX]}],
    )
    assert reply.message.content == "seen"
    with pytest.raises(ollama.ResponseError) as refused:
        client.chat(
            model=PLAIN, messages=[{"role": "user", "content": "say x", "images": [PNG_1PX]}]
        )
    assert refused.value.status_code == 400 and "does not accept images" in refused.value.error


def test_show_and_capabilities(client: ollama.Client) -> None:
    shown = client.show(f"{REASONER}:latest")
    assert shown.capabilities is not None
    assert {"completion", "tools"} <= set(shown.capabilities)
    vision = client.show(VISION)
    assert "vision" in (vision.capabilities or [])
    assert shown.details is not None and shown.details.format == "safetensors"


def test_ps_and_version(client: ollama.Client) -> None:
    client.chat(model=PLAIN, messages=[{"role": "user", "content": "say hi"}])
    loaded = {m.model: m for m in client.ps().models}
    assert f"{PLAIN}:latest" in loaded
    entry = loaded[f"{PLAIN}:latest"]
    assert entry.size and entry.size_vram == entry.size and entry.expires_at is not None
    assert client._client.get("/api/version").json()["version"]


def test_errors_in_ollamas_shape(client: ollama.Client, gateway: LiveGateway) -> None:
    with pytest.raises(ollama.ResponseError) as missing:
        client.chat(model="nope", messages=[{"role": "user", "content": "hi"}])
    assert missing.value.status_code == 404
    assert "nope" in missing.value.error and f"{OK}:latest" in missing.value.error
    with pytest.raises(ollama.ResponseError) as bad:
        client.chat(model=PLAIN, messages=[{"role": "user", "content": "hi"}], options={"top_p": 5})
    assert bad.value.status_code == 400 and "top_p" in bad.value.error
    raw = httpx.post(f"{gateway.url}/api/chat", content=b"{not json", timeout=10)
    assert raw.status_code == 400 and set(raw.json()) == {"error"}
    with pytest.raises(ollama.ResponseError) as keep:
        client.chat(model=PLAIN, messages=[{"role": "user", "content": "hi"}], keep_alive="soon")
    assert keep.value.status_code == 400 and "keep_alive" in keep.value.error


def test_format_json_needs_an_lm(client: ollama.Client) -> None:
    # Only language models (lm) decode under a grammar: a vision model's format is
    # refused before any worker runs.
    with pytest.raises(ollama.ResponseError) as refused:
        client.chat(model=VISION, messages=[{"role": "user", "content": "say {}"}], format="json")
    assert refused.value.status_code == 400 and "format" in refused.value.error


def test_a_stream_error_after_the_start(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError):
        for _ in client.chat(
            model=PLAIN, messages=[{"role": "user", "content": "crash now"}], stream=True
        ):
            pass


def test_generate_refuses_what_it_cannot_honour(client: ollama.Client) -> None:
    for field, value in (("suffix", "end"), ("template", "{{ .Prompt }}")):
        with pytest.raises(ollama.ResponseError) as refused:
            client.generate(model=PLAIN, prompt="say x", **{field: value})
        assert refused.value.status_code == 400 and field in refused.value.error
    with pytest.raises(ollama.ResponseError) as context:
        client.generate(model=PLAIN, prompt="say x", context=[1, 2, 3])
    assert context.value.status_code == 400 and "/api/chat" in context.value.error


def test_an_empty_chat_with_keep_alive_zero_unloads(gateway: LiveGateway, connect: Connect) -> None:
    with LiveGateway({"model_path": PLAIN}) as gw:
        c = connect(gw.url)
        assert c.chat(model=PLAIN, messages=[]).done_reason == "load"
        assert gw.registry.resolve(PLAIN).state.public == "ready"
        assert c.chat(model=PLAIN, messages=[], keep_alive=0).done_reason == "unload"
        assert gw.registry.resolve(PLAIN).state.public == "unloaded"


def test_pull_offline_and_of_a_local_folder(client: ollama.Client) -> None:
    before = {m.model for m in client.list().models}
    with pytest.raises(ollama.ResponseError) as offline:  # the tests run with HF_HUB_OFFLINE
        for _ in client.pull("mlx-community/Qwen3-0.6B-4bit", stream=True):
            pass
    assert "offline" in offline.value.error and "HF_HUB_OFFLINE" in offline.value.error
    with pytest.raises(ollama.ResponseError) as not_streamed:
        client.pull("mlx-community/Qwen3-0.6B-4bit")
    assert not_streamed.value.status_code == 503
    assert {m.model for m in client.list().models} == before
    # A served name pulls its entry's repo again (an update): offline here too.
    with pytest.raises(ollama.ResponseError) as update:
        client.pull(f"{PLAIN}:latest")
    assert update.value.status_code == 503 and PLAIN in update.value.error


def test_pull_of_a_model_in_a_local_folder(tmp_path: Path, connect: Connect) -> None:
    folder = tmp_path / "fake" / "ok"  # the fake worker reads its mode from the path
    folder.mkdir(parents=True)
    with LiveGateway({"model_path": str(folder), "served_model_name": "local"}) as gw:
        c = connect(gw.url)
        assert c.pull("local").status == "success"  # nothing to download
        assert [p.status for p in c.pull("local", stream=True)] == ["success"]


def test_copy_then_delete_the_copy(
    client: ollama.Client, gateway: LiveGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mlx_gateway.worker")
    assert client.copy(PLAIN, "plain-copy").status == "success"
    assert "plain-copy:latest" in {m.model for m in client.list().models}
    reply = client.chat(model="plain-copy", messages=[{"role": "user", "content": "say copied"}])
    assert reply.message.content == "copied" and reply.model == "plain-copy"
    with pytest.raises(ollama.ResponseError) as taken:
        client.copy(OK, "plain-copy:latest")
    assert taken.value.status_code == 400 and "already names" in taken.value.error
    with pytest.raises(ollama.ResponseError) as configured:
        client.delete(PLAIN)
    assert configured.value.status_code == 400 and "config file" in configured.value.error
    assert client.delete("plain-copy:latest").status == "success"
    assert "plain-copy:latest" not in {m.model for m in client.list().models}
    # A copy or delete changes the entries (a copy is an alias of the original's):
    # a worker stopped for it says so, not that the gateway is shutting down.
    stopped = re.compile(r"\[.*\] stopping: (.*)")
    reasons: list[str] = []
    deadline = time.monotonic() + 10
    while not reasons and time.monotonic() < deadline:
        reasons = [m[1] for r in caplog.records if (m := stopped.match(r.getMessage()))]
        time.sleep(0.05)
    assert reasons and all("config entry" in r for r in reasons), reasons
    assert not any("shutting down" in r.getMessage() for r in caplog.records)
    assert f"{PLAIN}:latest" in {m.model for m in client.list().models}
    with pytest.raises(ollama.ResponseError) as unknown:
        client.delete("never-there")
    assert unknown.value.status_code == 404


def test_pull_delete_copy_are_admin_endpoints(connect: Connect) -> None:
    with LiveGateway(
        {"model_path": PLAIN}, api_keys=["client-key"], admin_keys=["admin-key"]
    ) as gw:
        user = connect(gw.url, headers={"Authorization": "Bearer client-key"})
        assert user.chat(model=PLAIN, messages=[{"role": "user", "content": "say ok"}]).done
        for call in (
            lambda: user.pull(PLAIN),
            lambda: user.delete(PLAIN),
            lambda: user.copy(PLAIN, "other"),
        ):
            with pytest.raises(ollama.ResponseError) as denied:
                call()
            assert denied.value.status_code == 403
        admin = connect(gw.url, headers={"Authorization": "Bearer admin-key"})
        with pytest.raises(ollama.ResponseError) as offline:  # let in; then offline
            admin.pull(PLAIN)
        assert offline.value.status_code == 503
        assert admin.copy(PLAIN, "other").status == "success"
        anonymous = connect(gw.url)
        with pytest.raises(ollama.ResponseError) as missing:
            anonymous.list()
        assert missing.value.status_code == 401


def test_a_client_that_leaves_a_stream_stops_its_request(gateway: LiveGateway) -> None:
    handle = gateway.registry.resolve(PLAIN)
    body = {
        "model": PLAIN,
        "messages": [{"role": "user", "content": " ".join(["word"] * 2000)}],  # 40 s of steps
    }
    with (
        httpx.Client(timeout=30) as http,
        http.stream("POST", f"{gateway.url}/api/chat", json=body) as response,
    ):
        # Hold on to the iterator: a dropped one is closed at once, and closing it
        # closes the connection, which would leave before the check below.
        lines = response.iter_lines()
        assert json.loads(next(lines))["done"] is False
        assert handle.inflight == 1
    assert wait_until(lambda: handle.inflight == 0, 10)


def test_the_context_error_names_num_predict_only_when_it_matters(client: ollama.Client) -> None:
    """A prompt that alone overflows the context says so; num_predict is named only
    when the answer's limit is what does not fit."""
    prompt = [{"role": "user", "content": "overflow 8 " + "w " * 20}]
    with pytest.raises(ollama.ResponseError) as alone:
        client.chat(model=PLAIN, messages=prompt)
    assert alone.value.status_code == 400
    assert "22 tokens" in alone.value.error and "num_predict" not in alone.value.error
    short = [{"role": "user", "content": "overflow 30 w w w"}]
    with pytest.raises(ollama.ResponseError) as with_limit:
        client.chat(model=PLAIN, messages=short, options={"num_predict": 40})
    assert "40 tokens" in with_limit.value.error and "num_predict" in with_limit.value.error
