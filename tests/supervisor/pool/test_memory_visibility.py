"""The memory budget is visible: budget, reserved, free and each model's need with
its source, in /v1/models, /health and /metrics of a real gateway (fake workers
over real ZeroMQ, reporting the memory we tell them to)."""

from __future__ import annotations

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
