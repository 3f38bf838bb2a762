"""A tiny llama sharded over a 2-rank ``mlx.launch`` ring on 127.0.0.1, served by the
real ``mlx-gateway`` command next to the same model in one process.

Tensor parallel: each rank holds half of every layer, and the ranks sum their
partial results over TCP at every layer, so an answer needs both ranks.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import psutil
import pytest

from .gateway import Gateway, alive, free_port, wait_until

pytestmark = pytest.mark.slow

PROMPTS = ["hello world", "the quick brown fox jumps over the lazy dog"]


def ring_models(model: Path) -> list[dict[str, Any]]:
    return [
        {"served_model_name": "single", "model_path": str(model), "idle_timeout": 0},
        {
            "served_model_name": "ring",
            "model_path": str(model),
            "idle_timeout": 0,
            "distributed": {
                "hosts": ["127.0.0.1"],
                "ranks_per_host": 2,
                "starting_port": free_port(),
            },
        },
    ]


@pytest.fixture(scope="module")
def gateway(tiny_lm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = Gateway(tmp_path_factory.mktemp("ring"), ring_models(tiny_lm_path))
    yield gw
    gw.stop()


def ask(gw: Gateway, model: str, text: str, max_tokens: int = 24, **body: Any) -> str:
    try:
        reply = httpx.post(
            f"{gw.base_url}/v1/chat/completions",
            json={
                "model": model,
                "messages": [{"role": "user", "content": text}],
                "max_tokens": max_tokens,
                "temperature": 0,
                **body,
            },
            timeout=120,
        )
    except httpx.TransportError as exc:
        # A non-streamed answer whose headers went out (after stream_keepalive s)
        # and then failed ends unfinished: the gateway's log says why.
        raise AssertionError(f"{exc!r}; the gateway's log:\n{gw.log()[-8000:]}") from exc
    assert reply.status_code == 200, reply.text
    return str(reply.json()["choices"][0]["message"]["content"])


def ranks(gw: Gateway) -> dict[int, int]:
    """MLX_RANK → pid of the ring's rank processes."""
    found = {}
    for pid in gw.worker_pids():
        try:
            rank = psutil.Process(pid).environ().get("MLX_RANK")
        except psutil.Error:
            continue
        if rank is not None and "mlx_gateway.workers" in " ".join(psutil.Process(pid).cmdline()):
            found[int(rank)] = pid
    return found


def test_greedy_answers_equal_the_single_process_ones(gateway: Gateway) -> None:
    for prompt in PROMPTS:
        assert ask(gateway, "ring", prompt) == ask(gateway, "single", prompt)
    # sampled with a seed: the same draws on every rank as in one process
    sampled = {"temperature": 1.0, "seed": 7}
    assert ask(gateway, "ring", PROMPTS[1], **sampled) == ask(
        gateway, "single", PROMPTS[1], **sampled
    )
    model = gateway.model("ring")
    assert model["state"] == "ready"
    assert sorted(ranks(gateway)) == [0, 1]


async def test_two_concurrent_streams_batch(gateway: Gateway) -> None:
    client = openai.AsyncOpenAI(base_url=f"{gateway.base_url}/v1", api_key="x", max_retries=0)
    seen_inflight: list[int] = []

    async def stream(text: str) -> tuple[str, str | None]:
        out, finish = "", None
        async for chunk in await client.chat.completions.create(
            model="ring",
            messages=[{"role": "user", "content": text}],
            max_tokens=200,  # seconds through the ring: the two overlap whatever the load
            temperature=0,
            stream=True,
        ):
            if chunk.choices:
                out += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
        return out, finish

    async def watch() -> None:
        async with httpx.AsyncClient() as http:
            while True:
                model = (await http.get(f"{gateway.base_url}/v1/models/ring")).json()
                seen_inflight.append(model["inflight"])
                await asyncio.sleep(0.05)

    watcher = asyncio.create_task(watch())
    try:
        answers = await asyncio.gather(stream(PROMPTS[0]), stream(PROMPTS[1]))
    finally:
        watcher.cancel()
    assert all(text and finish in ("length", "stop") for text, finish in answers)
    assert max(seen_inflight) == 2  # both in the worker's batch at once


def test_a_killed_rank_fails_the_request_at_once_and_the_group_restarts(
    gateway: Gateway,
) -> None:
    ask(gateway, "ring", "load it", max_tokens=1)  # the group is up
    group_pid = gateway.model("ring")["pid"]  # mlx.launch
    before = ranks(gateway)
    assert sorted(before) == [0, 1]
    body = {
        "model": "ring",
        "messages": [{"role": "user", "content": PROMPTS[1]}],
        "max_tokens": 1500,
        "temperature": 0,
        "stream": True,
    }
    events: list[str] = []
    killed_at = None
    with httpx.stream(
        "POST", f"{gateway.base_url}/v1/chat/completions", json=body, timeout=60
    ) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            events.append(line[6:])
            if killed_at is None and len(events) == 3:
                psutil.Process(before[1]).send_signal(signal.SIGKILL)
                killed_at = time.monotonic()
    assert killed_at is not None
    assert time.monotonic() - killed_at < 10.0
    assert events[-1] == "[DONE]"
    assert "error" in json.loads(events[-2])
    # the whole group went, rank 0 and mlx.launch too, and the gateway saw it
    assert wait_until(lambda: not any(alive(p) for p in before.values()), timeout=15)
    assert wait_until(lambda: gateway.model("ring")["pid"] != group_pid, timeout=15)
    # the next request starts a new group, which answers as before
    assert ask(gateway, "ring", PROMPTS[0]) == ask(gateway, "single", PROMPTS[0])
    after = ranks(gateway)
    assert sorted(after) == [0, 1] and not set(after.values()) & set(before.values())


def test_no_rank_outlives_a_killed_gateway(tiny_lm_path: Path, tmp_path: Path) -> None:
    gw = Gateway(tmp_path, ring_models(tiny_lm_path)[1:])
    try:
        ask(gw, "ring", "hi", max_tokens=2)
        pids = gw.worker_pids()
        assert sorted(ranks(gw)) == [0, 1]
    finally:
        gw.stop(signal.SIGKILL)
    assert wait_until(lambda: not any(alive(p) for p in pids), timeout=20)
