"""The memory budget is visible: budget, reserved, free and each model's need with
its source, in /v1/models, /health and /metrics of a real gateway (fake workers
over real ZeroMQ, reporting the memory we tell them to)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import httpx
import pytest

from ..live import LiveGateway

pytestmark = pytest.mark.slow

MiB = 2**20


def test_budget_reserved_free_and_needs_everywhere() -> None:
    ready = {"model_path": "fake/ok", "worker_env": {"FAKE_RSS": str(300 * MiB)}}
    configured = {"model_path": "fake/two", "memory_estimate": "1GiB"}
    unknown = {"model_path": "fake/three"}
    with LiveGateway(ready, configured, unknown, memory_budget="4GiB") as gw:
        body = {"model": "fake/ok", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(f"{gw.url}/v1/chat/completions", json=body).status_code == 200

        listing = httpx.get(f"{gw.url}/v1/models").json()
        budget = {"budget": 4096 * MiB, "reserved": 300 * MiB, "free": 3796 * MiB}
        assert listing["memory"] == budget
        needs = {m["id"]: (m["memory_need"], m["memory_need_source"]) for m in listing["data"]}
        assert needs == {
            "fake/ok": (300 * MiB, "measured"),
            "fake/two": (1024 * MiB, "configured"),
            "fake/three": (None, "unknown"),
        }

        health = httpx.get(f"{gw.url}/health").json()
        assert health["memory"] == budget
        assert health["models"]["fake/two"]["memory_need_source"] == "configured"

        metrics = httpx.get(f"{gw.url}/metrics").text
        assert f"mlx_gateway_memory_budget_bytes {4096 * MiB}" in metrics
        assert f"mlx_gateway_memory_reserved_bytes {300 * MiB}" in metrics
        assert f"mlx_gateway_memory_free_bytes {3796 * MiB}" in metrics
        assert (
            f'mlx_gateway_model_memory_need_bytes{{model="fake/ok",source="measured"}} {300 * MiB}'
            in metrics
        )
        assert 'model="fake/two",source="configured"' in metrics


def test_refused_requests_do_not_raise_the_remembered_need(tmp_path: Path) -> None:
    """A worker whose memory grew while it refused requests (a real one tokenized a
    huge prompt to find it does not fit) teaches nothing: the measured need, and
    needs.json, stay where the requests that ran put them; growth from a request
    that ran is still learned."""
    model = {"model_path": "fake/ok", "worker_env": {"FAKE_RSS": str(100 * MiB)}}
    needs_file = Path(os.environ["MLX_GATEWAY_CACHE_DIR"]) / "needs.json"
    with LiveGateway(model, memory_budget="4GiB", hang_timeout=1.0) as gw:

        def chat(text: str) -> int:
            body = {"model": "fake/ok", "messages": [{"role": "user", "content": text}]}
            return httpx.post(f"{gw.url}/v1/chat/completions", json=body).status_code

        def need() -> int:
            return int(httpx.get(f"{gw.url}/v1/models/fake/ok").json()["memory_need"])

        handle = gw.registry.resolve("fake/ok")

        def next_heartbeats() -> None:
            beats = handle.last_heartbeat
            deadline = time.monotonic() + 10
            while handle.last_heartbeat <= beats + 0.6:  # more than one beat (0.25 s)
                assert time.monotonic() < deadline
                time.sleep(0.1)

        assert chat("hi") == 200
        assert need() == 100 * MiB
        next_heartbeats()  # the one after the answer was learned from
        for _ in range(3):
            assert chat("reject bloat") == 400
        next_heartbeats()
        assert handle.memory.rss == 512 * 100 * MiB  # the worker did report the growth
        assert need() == 100 * MiB
        remembered = json.loads(needs_file.read_text()) if needs_file.exists() else {}
        assert all(v <= 100 * MiB for v in remembered.values()), remembered
        # a request that ran and grew the worker is learned
        assert chat("grow a little") == 200
        deadline = time.monotonic() + 10
        while need() != 1024 * 100 * MiB:
            assert time.monotonic() < deadline, need()
            time.sleep(0.1)
