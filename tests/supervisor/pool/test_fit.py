""" "Will it fit?": ``GET /v1/models/{id}/fit`` against what ``POST …/load`` then
does, over real HTTP, with the real supervisor and fake workers that report the
memory we tell them to (real ZeroMQ, real processes)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from mlx_gateway.supervisor.pool.state import WorkerState
from mlx_gateway.supervisor.status import fetch_models, table

from ..fakes import alive, chat, run, wait_for
from ..live import LiveGateway

pytestmark = pytest.mark.slow

GB = 10**9


def model(name: str, gb: float = 1.0, **extra: Any) -> dict[str, Any]:
    size = int(gb * GB)
    return {
        "model_path": f"{name}/ok",  # its own measured need (remembered per path)
        "served_model_name": name,
        "memory_estimate": size,
        "worker_env": {"FAKE_RSS": str(size)},
        **extra,
    }


def fit(http: httpx.Client, name: str) -> dict[str, Any]:
    r = http.get(f"/v1/models/{name}/fit")
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


def states(gw: LiveGateway) -> dict[str, tuple[str, int | None]]:
    return {h.name: (h.state.public, h.pid) for h in gw.registry.handles}


async def _hold(handle: Any) -> asyncio.Task[Any]:
    task = asyncio.create_task(run(handle, chat("hang", request_id=f"hold-{handle.name}")))
    await wait_for(lambda: handle.inflight >= 1)
    return task


def hold(gw: LiveGateway, name: str) -> asyncio.Task[Any]:
    """A request that keeps ``name`` busy until :func:`release`."""
    handle = gw.registry.resolve(name)
    return gw.run(_hold(handle))


def release(gw: LiveGateway, task: asyncio.Task[Any]) -> None:
    async def stop() -> None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    gw.run(stop())


def test_fit_names_exactly_the_models_a_load_evicts() -> None:
    with (
        LiveGateway(model("a"), model("b"), model("c"), memory_budget="2.5GB") as gw,
        httpx.Client(base_url=gw.url, timeout=30) as http,
    ):
        first = fit(http, "a")
        assert (first["verdict"], first["fits"], first["evict"]) == ("fits", True, [])
        assert (first["need"], first["need_source"]) == (GB, "configured")
        assert first["need_parts"] == {}  # an estimate lists its parts (vision…)
        assert first["budget"] == 2.5 * GB
        for name in ("a", "b", "a"):  # b is now the least recently used
            assert http.post(f"/v1/models/{name}/load").status_code == 200
            gw.run(run(gw.registry.resolve(name), chat("use")))
        assert fit(http, "a")["verdict"] == "resident"
        answer = fit(http, "c")
        assert answer["verdict"] == "evicts" and answer["fits"] is True
        assert answer["evict"] == ["b"] and answer["blockers"] == []
        assert answer["free"] == int(0.5 * GB)
        assert "stops the idle models b" in answer["message"]
        listed = {m["id"]: m["fit"] for m in http.get("/v1/models").json()["data"]}
        assert listed["c"] == {"verdict": "evicts", "evict": ["b"], "blockers": []}
        rows = {line.split()[0]: line for line in table(fetch_models(gw.url)).splitlines()}
        assert "evicts b" in rows["c"] and "loaded" in rows["a"]  # mlx-gateway status
        before = states(gw)
        r = http.post("/v1/models/c/load")
        assert r.status_code == 200, r.text
        after = states(gw)
        assert after["a"] == before["a"]  # untouched, same process
        assert after["b"][0] == "unloaded" and not alive(before["b"][1])
        assert after["c"][0] == "ready"


def test_a_blocked_fit_is_refused_by_load_and_force_loads_past_it() -> None:
    with (
        LiveGateway(
            model("a", pinned=True),
            model("b"),
            model("c", queue_timeout=1),
            memory_budget="2.5GB",
            min_resident_seconds=600,
        ) as gw,
        httpx.Client(base_url=gw.url, timeout=30) as http,
    ):
        assert http.post("/v1/models/a/load").status_code == 200
        busy = hold(gw, "b")
        answer = fit(http, "c")
        assert (answer["verdict"], answer["fits"], answer["evict"]) == ("waits", False, [])
        blockers = {b["name"]: b for b in answer["blockers"]}
        assert set(blockers) == {"a", "b"}
        assert blockers["a"]["pinned"] and blockers["b"]["inflight"] == 1
        assert answer["force"] == {"evict": [], "over_budget": int(0.5 * GB)}
        before = states(gw)
        r = http.post("/v1/models/c/load")
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "no_capacity"
        assert states(gw) == before  # refused: nothing stopped, c not started
        r = http.post("/v1/models/c/load", json={"force": True})
        assert r.status_code == 200, r.text
        after = states(gw)
        assert after["a"] == before["a"] and after["b"] == before["b"]
        assert after["c"][0] == "ready"
        memory = http.get("/v1/models").json()["memory"]
        assert memory["free"] == -answer["force"]["over_budget"]
        release(gw, busy)


def test_too_big_is_refused_and_force_stops_what_fit_lists() -> None:
    with (
        LiveGateway(model("a"), model("b"), model("huge", gb=3), memory_budget="2.5GB") as gw,
        httpx.Client(base_url=gw.url, timeout=30) as http,
    ):
        for name in ("b", "a"):
            assert http.post(f"/v1/models/{name}/load").status_code == 200
        answer = fit(http, "huge")
        assert (answer["verdict"], answer["fits"]) == ("too_big", False)
        assert answer["force"] == {"evict": ["b", "a"], "over_budget": int(0.5 * GB)}
        assert "more than the whole memory_budget" in answer["message"]
        before = states(gw)
        r = http.post("/v1/models/huge/load")
        assert r.status_code == 503 and r.json()["error"]["code"] == "insufficient_memory"
        assert states(gw) == before
        r = http.post("/v1/models/huge/load?force=true")
        assert r.status_code == 200, r.text
        after = states(gw)
        assert after["huge"][0] == "ready"
        assert after["a"][0] == after["b"][0] == "unloaded"
        # Served while over the budget, by the worker it started.
        text, _ = gw.run(run(gw.registry.resolve("huge"), chat("still here")))
        assert text == "still here "
        assert gw.registry.resolve("huge").state is WorkerState.READY


def test_fit_of_an_unknown_model_and_a_bad_force() -> None:
    with (
        LiveGateway(model("a"), memory_budget="2.5GB") as gw,
        httpx.Client(base_url=gw.url, timeout=30) as http,
    ):
        r = http.get("/v1/models/nope/fit")
        assert r.status_code == 404
        error = r.json()["error"]
        assert error["code"] == "model_not_found" and "a" in error["message"]
        r = http.post("/v1/models/a/load", json={"force": "yes please"})
        assert r.status_code == 400
        assert r.json()["error"]["param"] == "force"
