"""The real ``mlx-gateway`` command serving two tiny real language models, driven
by the official openai SDK with strict response validation."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from tests.fixtures.tiny_models import build_tiny_lm

from .gateway import Gateway, alive, wait_until

pytestmark = pytest.mark.slow

MLX_LIBRARIES = ("mlx", "mlx_lm", "mlx_vlm", "mlx_embeddings", "mlx_whisper", "mflux")


@pytest.fixture(scope="module")
def second_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_lm(tmp_path_factory.mktemp("lm-b"), seed=1)


@pytest.fixture(scope="module")
def gateway(
    tiny_lm_path: Path, second_lm: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    gw = Gateway(
        tmp_path_factory.mktemp("gw"),
        [
            {"served_model_name": "alpha", "model_path": str(tiny_lm_path), "idle_timeout": 0},
            {
                "served_model_name": "beta",
                "aliases": ["beta-alias"],
                "model_path": str(second_lm),
                "idle_timeout": 2,
            },
        ],
    )
    yield gw
    gw.stop()


def client(gw: Gateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{gw.base_url}/v1", api_key="unused", _strict_response_validation=True
    )


async def ask(c: openai.AsyncOpenAI, model: str, text: str, max_tokens: int = 24) -> str:
    reply = await c.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": text}],
        max_tokens=max_tokens,
        temperature=0,
    )
    assert reply.model == model or model.endswith("-alias")
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    return reply.choices[0].message.content or ""


async def ask_streaming(c: openai.AsyncOpenAI, model: str, text: str, max_tokens: int = 24) -> str:
    stream = await c.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": text}],
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    parts, usage = [], None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            parts.append(choice.delta.content or "")
    assert usage is not None and usage.completion_tokens > 0
    return "".join(parts)


async def test_two_models_answer_concurrently_streaming_and_not(gateway: Gateway) -> None:
    c = client(gateway)
    prompts = ["hello world", "the quick brown fox"]
    jobs = []
    for model in ("alpha", "beta"):
        for prompt in prompts:
            jobs += [ask(c, model, prompt), ask_streaming(c, model, prompt)]
    results = await asyncio.gather(*jobs)
    # Pairs (non-stream, stream) agree at temperature 0.
    for plain, streamed in zip(results[::2], results[1::2], strict=True):
        assert plain and plain == streamed
    # Different random weights, different answers: the two models really are two.
    assert results[0] != results[4]
    pids = {gateway.model(m)["pid"] for m in ("alpha", "beta")}
    assert len(pids) == 2 and all(alive(pid) for pid in pids)
    await c.close()


async def test_models_listing_and_alias(gateway: Gateway) -> None:
    c = client(gateway)
    listed = await c.models.list()
    assert [m.id for m in listed.data] == ["alpha", "beta"]
    assert await ask(c, "beta-alias", "hello") == await ask(c, "beta", "hello")
    with pytest.raises(openai.NotFoundError) as info:
        await ask(c, "gamma", "hello")
    assert "alpha" in str(info.value) and "beta" in str(info.value)
    await c.close()


def test_completions_endpoint(gateway: Gateway) -> None:
    c = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="x")
    reply = c.completions.create(model="alpha", prompt="once upon", max_tokens=5, temperature=0)
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage is not None and reply.usage.completion_tokens <= 5


def test_context_overflow_is_a_400_before_any_stream(gateway: Gateway) -> None:
    # Loaded first: a stream for a model still loading starts at once (with
    # keep-alive comments), and a rejection then comes as an error event.
    httpx.post(f"{gateway.base_url}/v1/models/alpha/load", timeout=60).raise_for_status()
    c = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="x")
    with pytest.raises(openai.BadRequestError) as info:
        c.chat.completions.create(
            model="alpha",
            messages=[{"role": "user", "content": "hello " * 3000}],
            stream=True,
        )
    assert "context length" in str(info.value)


def _long_prompt(gw: Gateway) -> str:
    """A prompt the tiny model answers without EOS for 1,500 tokens at temperature 0."""
    for prompt in ("hello world", "the quick brown fox", "count the steps", "stop", "one two"):
        r = httpx.post(
            f"{gw.base_url}/v1/chat/completions",
            json={
                "model": "alpha",
                "messages": [{"role": "user", "content": prompt}],
                "max_tokens": 1500,
                "temperature": 0,
            },
            timeout=120,
        ).json()
        if r["choices"][0]["finish_reason"] == "length":
            return prompt
    pytest.skip("no prompt keeps the tiny model talking for 1,500 tokens")


def test_killed_worker_fails_its_stream_at_once_and_recovers(gateway: Gateway) -> None:
    prompt = _long_prompt(gateway)
    pid = gateway.model("alpha")["pid"]
    body = {
        "model": "alpha",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 1500,
        "temperature": 0,
        "stream": True,
    }
    events: list[str] = []
    killed_at = None
    url = f"{gateway.base_url}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, timeout=30) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            events.append(line[6:])
            if killed_at is None and len(events) == 3:
                os.kill(pid, signal.SIGKILL)
                killed_at = time.monotonic()
    assert killed_at is not None
    assert time.monotonic() - killed_at < 1.0
    assert events[-1] == "[DONE]"
    error = json.loads(events[-2])["error"]
    assert "SIGKILL" in error["message"]
    # The next request starts a new worker and succeeds.
    reply = httpx.post(
        f"{gateway.base_url}/v1/chat/completions",
        json={"model": "alpha", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        timeout=60,
    )
    assert reply.status_code == 200, reply.text
    assert gateway.model("alpha")["pid"] != pid


def test_idle_worker_is_reaped_and_comes_back(gateway: Gateway) -> None:
    c = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="x")
    c.chat.completions.create(
        model="beta", messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    pid = gateway.model("beta")["pid"]
    finished = time.monotonic()
    assert alive(pid)
    assert wait_until(lambda: not alive(pid), timeout=10)
    assert time.monotonic() - finished >= 1.5  # not before idle_timeout (2 s)
    assert gateway.model("beta")["state"] == "unloaded"
    c.chat.completions.create(
        model="beta", messages=[{"role": "user", "content": "hi"}], max_tokens=4
    )
    new_pid = gateway.model("beta")["pid"]
    assert new_pid != pid and alive(new_pid)


def test_gateway_process_never_loads_mlx(gateway: Gateway) -> None:
    # After serving requests, no MLX library is mapped into the gateway process.
    httpx.post(
        f"{gateway.base_url}/v1/chat/completions",
        json={"model": "alpha", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        timeout=60,
    ).raise_for_status()
    maps = Path(f"/proc/{gateway.proc.pid}/maps")
    if maps.exists():
        assert "libmlx" not in maps.read_text()
    # And importing everything the gateway runs imports no MLX library.
    code = (
        "import sys, mlx_gateway.supervisor.cli, mlx_gateway.supervisor.app as a\n"
        "from mlx_gateway.supervisor.config import config_from_model_path\n"
        "a.create_app(config_from_model_path('org/x'))\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {MLX_LIBRARIES!r}]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_offline_model_gets_a_503_that_says_so(tmp_path: Path) -> None:
    gw = Gateway(tmp_path, [{"model_path": "mlx-community/not-in-this-cache-4bit"}])
    try:
        r = httpx.post(
            f"{gw.base_url}/v1/chat/completions",
            json={
                "model": "mlx-community/not-in-this-cache-4bit",
                "messages": [{"role": "user", "content": "hi"}],
            },
            timeout=60,
        )
        assert r.status_code == 503
        assert "offline" in r.json()["error"]["message"]
        assert gw.model("mlx-community/not-in-this-cache-4bit")["state"] == "failed"
    finally:
        gw.stop()


def test_sigterm_stops_every_worker(tiny_lm_path: Path, tmp_path: Path) -> None:
    gw = Gateway(tmp_path, [{"served_model_name": "m", "model_path": str(tiny_lm_path)}])
    httpx.post(
        f"{gw.base_url}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        timeout=60,
    ).raise_for_status()
    pids = gw.worker_pids()
    assert pids
    assert gw.stop(signal.SIGTERM) == 0
    assert wait_until(lambda: not any(alive(p) for p in pids), timeout=5)


def test_no_worker_outlives_a_killed_gateway(
    tiny_lm_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A temp folder of its own (short: it holds the ZeroMQ socket path): any other
    # gateway starting on this machine meanwhile would remove the killed one's
    # leftovers from the shared /tmp before this test looks at them.
    own_tmp = tempfile.mkdtemp(prefix="gwk")
    monkeypatch.setenv("TMPDIR", own_tmp)
    gw = Gateway(tmp_path, [{"served_model_name": "m", "model_path": str(tiny_lm_path)}])
    httpx.post(
        f"{gw.base_url}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        timeout=60,
    ).raise_for_status()
    pids = gw.worker_pids()
    assert pids
    endpoint = next(a for a in psutil.Process(pids[0]).cmdline() if a.startswith("ipc://"))
    runtime_dir = Path(endpoint.removeprefix("ipc://")).parent
    assert runtime_dir.is_dir()
    gw.stop(signal.SIGKILL)
    assert wait_until(lambda: not any(alive(p) for p in pids), timeout=5)
    assert runtime_dir.is_dir()  # kill -9 skipped the cleanup
    # And the next launch works, and removes what the killed one left.
    (tmp_path / "again").mkdir()
    again = Gateway(
        tmp_path / "again", [{"served_model_name": "m", "model_path": str(tiny_lm_path)}]
    )
    try:
        r = httpx.post(
            f"{again.base_url}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        assert not runtime_dir.exists()
    finally:
        assert again.stop() == 0
