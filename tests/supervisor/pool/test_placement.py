"""Memory budget, eviction, groups, admission and hangs: the real supervisor
against fake workers that report the memory we tell them to."""

from __future__ import annotations

import asyncio
import os
import signal
import textwrap
import time
from typing import Any

import pytest

from mlx_gateway.supervisor.config import load_config
from mlx_gateway.supervisor.errors import (
    GatewayError,
    ModelUnavailable,
    TooManyRequests,
    WorkerCrashed,
)
from mlx_gateway.supervisor.pool.placement import RESIDENT, refusals
from mlx_gateway.supervisor.pool.registry import Registry
from mlx_gateway.supervisor.pool.state import WorkerState

from ..fakes import alive, chat, fake_command, fake_config, run, wait_for

pytestmark = pytest.mark.slow

GB = 10**9


def model(name: str, gb: float = 1.0, **extra: Any) -> dict[str, Any]:
    """A fake model that needs (and reports) ``gb`` gigabytes."""
    size = int(gb * GB)
    return {
        "model_path": "fake/ok",
        "served_model_name": name,
        "memory_estimate": size,
        "worker_env": {"FAKE_RSS": str(size)},
        **extra,
    }


async def hold(handle: Any, request_id: str) -> asyncio.Task[Any]:
    """A request that keeps the worker busy until cancelled."""
    task = asyncio.create_task(run(handle, chat("hang", request_id=request_id)))
    await wait_for(lambda: handle.inflight >= 1)
    return task


async def test_lru_idle_worker_is_evicted_to_fit(make_registry: Any) -> None:
    registry = await make_registry(model("a"), model("b"), model("c"), memory_budget="2.5GB")
    a, b, c = registry.handles
    await run(a, chat("x"))
    await run(b, chat("y"))
    await run(a, chat("a was used last"))  # b is now the least recently used
    a_pid, b_pid = a.pid, b.pid
    await run(c, chat("z"))
    assert b.state is WorkerState.STOPPED and not alive(b_pid)
    assert a.state is WorkerState.READY and a.pid == a_pid
    assert b.evictions == 1 and a.evictions == 0
    assert registry.placement.used() <= registry.placement.budget


async def test_busy_and_pinned_workers_are_never_evicted(make_registry: Any) -> None:
    registry = await make_registry(
        model("a", pinned=True),
        model("b"),
        model("c", queue_timeout=1),
        memory_budget="2.5GB",
    )
    a, b, c = registry.handles
    await run(a, chat("x"))
    busy = await hold(b, "busy-b")
    started = time.monotonic()
    with pytest.raises(ModelUnavailable) as info:
        await run(c, chat("z"))
    assert 0.9 < time.monotonic() - started < 3
    assert info.value.status == 503 and info.value.code == "no_capacity"
    assert "'b' (1.0 GB, 1 in flight)" in info.value.message
    assert "'a' (1.0 GB, 0 in flight, pinned)" in info.value.message
    assert a.state is WorkerState.READY and b.state is WorkerState.READY
    assert c.state is WorkerState.STOPPED
    busy.cancel()
    await asyncio.gather(busy, return_exceptions=True)


async def test_newcomer_waits_for_a_busy_worker_then_starts(make_registry: Any) -> None:
    registry = await make_registry(
        model("a"), model("b"), memory_budget="1.5GB", min_resident_seconds=600
    )
    a, b = registry.handles
    busy = await hold(a, "busy-a")
    waiting = asyncio.create_task(run(b, chat("after a")))
    await wait_for(lambda: registry.placement.waiting_for_room() == ["b"])
    assert not waiting.done() and b.state is WorkerState.STOPPED
    busy.cancel()  # a's request ends: a is idle, b evicts it
    await asyncio.gather(busy, return_exceptions=True)
    text, _ = await asyncio.wait_for(waiting, 10)
    assert text == "after a " and a.state is WorkerState.STOPPED


async def test_a_busy_model_is_drained_so_another_is_not_starved(make_registry: Any) -> None:
    registry = await make_registry(
        model("a"), model("b"), memory_budget="1.5GB", min_resident_seconds=0.3
    )
    a, b = registry.handles
    first = asyncio.create_task(run(a, chat(" ".join(["w"] * 40), request_id="a1")))
    await wait_for(lambda: a.inflight == 1)
    wanting_b = asyncio.create_task(run(b, chat("b please")))
    await wait_for(lambda: a.draining, timeout=5)
    # New requests for a are held back while it drains; b gets its turn first.
    late_a = asyncio.create_task(run(a, chat("late a", request_id="a2")))
    text_b, _ = await asyncio.wait_for(wanting_b, 10)
    assert text_b == "b please "
    assert (await first)[0].count("w") == 40
    assert not late_a.done()
    # Later, a comes back (b is idle and evictable) and the held request is served.
    assert (await asyncio.wait_for(late_a, 10))[0] == "late a "


async def test_a_model_that_can_never_fit(make_registry: Any, tmp_path: Any) -> None:
    registry = await make_registry(model("huge", gb=10), memory_budget="2GB")
    with pytest.raises(ModelUnavailable) as info:
        await run(registry.handles[0], chat("x"))
    assert info.value.code == "insufficient_memory"
    assert "10.0 GB" in info.value.message and "2.0 GB" in info.value.message
    # At launch it is named, and the gateway starts anyway for the models that fit.
    (message,) = refusals(fake_config(model("huge", gb=10), model("fine"), memory_budget="2GB"))
    assert message.startswith("models[0] ('huge') needs about 10.0 GB (its memory_estimate)")
    assert "more than server.memory_budget (2.0 GB)" in message
    assert refusals(fake_config(model("fine", gb=1), memory_budget="2GB")) == []


async def test_group_members_never_run_together(make_registry: Any) -> None:
    registry = await make_registry(
        model("a", group="big"), model("b", group="big"), model("c"), memory_budget="100GB"
    )
    a, b, c = registry.handles
    await run(a, chat("x"))
    await run(c, chat("y"))
    await run(b, chat("z"))
    assert a.state is WorkerState.STOPPED and a.evictions == 1
    assert c.state is WorkerState.READY


async def test_admission_queue_then_429_then_queue_timeout(make_registry: Any) -> None:
    registry = await make_registry(model("m", max_concurrency=1, max_queue=1, queue_timeout=1))
    (m,) = registry.handles
    busy = await hold(m, "slot-holder")
    queued = asyncio.create_task(run(m, chat("queued")))
    await wait_for(lambda: m.waiting == 1)
    with pytest.raises(TooManyRequests) as info:
        await run(m, chat("one too many"))
    assert info.value.status == 429 and info.value.headers["Retry-After"] == "1"
    with pytest.raises(ModelUnavailable, match="queue_timeout") as timeout_info:
        await queued
    assert timeout_info.value.status == 503
    busy.cancel()
    await asyncio.gather(busy, return_exceptions=True)
    await wait_for(lambda: m.inflight == 0)
    assert (await run(m, chat("free again")))[0] == "free again "


async def test_queued_request_gets_the_slot_when_it_frees(make_registry: Any) -> None:
    registry = await make_registry(model("m", max_concurrency=1))
    (m,) = registry.handles
    busy = await hold(m, "slot-holder")
    queued = asyncio.create_task(run(m, chat("next in line")))
    await wait_for(lambda: m.waiting == 1)  # it waits for the slot
    assert not queued.done()
    busy.cancel()
    await asyncio.gather(busy, return_exceptions=True)
    assert (await asyncio.wait_for(queued, 5))[0] == "next in line "


async def test_leaving_during_a_load_started_only_for_you_stops_it(
    make_registry: Any,
) -> None:
    registry = await make_registry({"model_path": "fake/slow-start"})
    (h,) = registry.handles
    task = asyncio.create_task(run(h, chat("x")))
    await wait_for(lambda: h.state is WorkerState.STARTING and h.pid is not None)
    pid = h.pid
    task.cancel()
    await wait_for(lambda: h.state is WorkerState.STOPPED, timeout=8)
    await wait_for(lambda: not alive(pid))


async def test_a_hung_worker_is_killed_and_its_requests_fail(make_registry: Any) -> None:
    registry = await make_registry(model("m"), hang_timeout=1)
    (m,) = registry.handles
    busy = asyncio.create_task(run(m, chat("hang")))
    await wait_for(lambda: m.inflight == 1)
    pid = m.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # no more heartbeats
    started = time.monotonic()
    with pytest.raises(WorkerCrashed, match="hung: no heartbeat"):
        await asyncio.wait_for(busy, 10)
    assert time.monotonic() - started < 4
    assert not alive(pid)
    assert (await run(m, chat("recovered")))[0] == "recovered "


async def test_admin_unload_and_load(make_registry: Any) -> None:
    registry = await make_registry(model("m"), {"model_path": "fake/load-error"})
    m, broken = registry.handles
    await registry.load("m")
    assert m.state is WorkerState.READY
    busy = await hold(m, "in-flight")
    with pytest.raises(GatewayError) as info:
        await registry.unload("m")
    assert info.value.status == 409
    await registry.unload("m", force=True)
    # The worker ends the request as cancelled when its grace runs out; the client
    # gets the reason instead.
    with pytest.raises(ModelUnavailable, match="unloaded by an admin request") as unloaded:
        await busy
    assert unloaded.value.status == 503 and unloaded.value.code == "model_stopped"
    assert m.state is WorkerState.STOPPED
    # load clears a failure backoff: the broken model is tried again at once.
    with pytest.raises(ModelUnavailable):
        await registry.load("fake/load-error")
    with pytest.raises(ModelUnavailable, match="download failed"):
        await registry.load("fake/load-error")
    assert broken.process.generation == 2


async def test_reload_keeps_replaces_adds_and_removes(make_registry: Any) -> None:
    registry = await make_registry(model("keep"), model("change"), model("remove"))
    keep, change, remove = registry.handles
    for h in registry.handles:
        await run(h, chat("x"))
    in_flight = await hold(change, "old-change")
    remove_pid = remove.pid
    new = fake_config(
        model("keep"),
        model("change", aliases=["changed"]),
        model("added"),
        shutdown_grace=1.0,
    )
    report = await registry.reload(new)
    assert report == {
        "added": ["added"],
        "changed": ["change"],
        "removed": ["remove"],
        "kept": ["keep"],
    }
    assert registry.resolve("keep") is keep
    assert registry.resolve("changed") is not change
    assert (await run(registry.resolve("added"), chat("hello")))[0] == "hello "
    with pytest.raises(GatewayError):
        registry.resolve("remove")
    await wait_for(lambda: not alive(remove_pid))
    # The replaced worker finishes its in-flight request before it stops.
    assert change.state is WorkerState.READY
    in_flight.cancel()
    await asyncio.gather(in_flight, return_exceptions=True)
    await wait_for(lambda: change.state is WorkerState.STOPPED)


async def test_a_replaced_model_refuses_a_late_request_at_once(make_registry: Any) -> None:
    """Once a reload's replaced handle has finished its requests and closed, a request
    that still holds it (a whole answer computed again after its worker died) is
    refused at once with the reason, instead of waiting for a start that never comes."""
    registry = await make_registry(model("change"))
    (change,) = registry.handles
    await run(change, chat("x"))
    await registry.reload(fake_config(model("change", aliases=["changed"]), shutdown_grace=1.0))
    await wait_for(lambda: change.state is WorkerState.STOPPED)
    with pytest.raises(ModelUnavailable, match="its config entry changed") as refused:
        await asyncio.wait_for(run(change, chat("late")), 5)
    assert refused.value.code == "model_replaced"
    assert (await run(registry.resolve("changed"), chat("new")))[0] == "new "


async def test_a_queued_request_survives_a_crash_of_the_slot_holder(make_registry: Any) -> None:
    registry = await make_registry(model("m", max_concurrency=1))
    (m,) = registry.handles
    crashing = asyncio.create_task(run(m, chat("crash now", request_id="crasher")))
    await wait_for(lambda: m.inflight == 1)
    queued = asyncio.create_task(run(m, chat("patient", request_id="queued")))
    await wait_for(lambda: m.waiting == 1)
    with pytest.raises(WorkerCrashed):
        await crashing
    # The queued request waits for the restart instead of failing with the crash.
    assert (await asyncio.wait_for(queued, 10))[0] == "patient "


async def yaml_registry(tmp_path: Any, text: str) -> Registry:
    """A registry built from a YAML config file, as ``mlx-gateway launch`` builds it."""
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    registry = Registry(load_config(path), command=fake_command)
    await registry.start()
    return registry


async def test_group_written_in_the_config_file_is_kept(tmp_path: Any) -> None:
    registry = await yaml_registry(
        tmp_path,
        """
        server: {memory_budget: 100GB, shutdown_grace: 1}
        models:
          - {model_path: fake/ok, served_model_name: a, group: big, memory_estimate: 1GB}
          - {model_path: fake/ok, served_model_name: b, group: big, memory_estimate: 1GB}
        """,
    )
    try:
        a, b = registry.handles
        assert a.config.group == b.config.group == "big"
        await run(a, chat("x"))
        await run(b, chat("y"))
        assert a.state is WorkerState.STOPPED and a.evictions == 1
        assert b.state is WorkerState.READY
    finally:
        await registry.close()


async def test_a_models_own_queue_timeout_from_the_config_file_applies(tmp_path: Any) -> None:
    registry = await yaml_registry(
        tmp_path,
        """
        server: {queue_timeout: 300, shutdown_grace: 1}
        models:
          - model_path: fake/ok
            served_model_name: m
            max_concurrency: 1
            queue_timeout: 1
        """,
    )
    try:
        (m,) = registry.handles
        busy = await hold(m, "slot-holder")
        started = time.monotonic()
        with pytest.raises(ModelUnavailable, match=r"waited 1 s \(queue_timeout\)"):
            await asyncio.wait_for(run(m, chat("queued")), 10)
        assert time.monotonic() - started < 5
        busy.cancel()
        await asyncio.gather(busy, return_exceptions=True)
    finally:
        await registry.close()


async def test_a_failed_group_member_in_backoff_does_not_hold_the_group(
    make_registry: Any,
) -> None:
    registry = await make_registry(
        {"model_path": "fake/load-error", "group": "g", "memory_estimate": GB},
        model("b", group="g", queue_timeout=2),
        memory_budget="100GB",
    )
    broken, b = registry.handles
    await run(b, chat("first"))
    with pytest.raises(ModelUnavailable, match="download failed"):
        await run(broken, chat("x"))  # evicts b, then fails to load
    assert broken.state is WorkerState.FAILED and b.state is WorkerState.STOPPED
    # Asked again within its backoff: refused at once, and it claims no room.
    with pytest.raises(ModelUnavailable, match="next attempt in"):
        await run(broken, chat("x"))
    assert not broken.reserved
    # past the backoff; nobody asks for the broken model
    await asyncio.sleep(1.2)  # not a wait: the backoff under test
    assert (await run(b, chat("b again")))[0] == "b again "


async def test_a_burst_at_a_loading_model_is_held_to_max_queue(make_registry: Any) -> None:
    registry = await make_registry(
        {"model_path": "fake/slow-start", "max_concurrency": 1, "max_queue": 1}
    )
    (m,) = registry.handles
    results = await asyncio.gather(
        *(run(m, chat(f"burst {i}", request_id=f"b{i}")) for i in range(6)),
        return_exceptions=True,
    )
    answered = [r for r in results if isinstance(r, tuple)]
    refused = [r for r in results if isinstance(r, TooManyRequests)]
    assert len(answered) == 2, results  # max_concurrency + max_queue
    assert len(refused) == 4, results
    assert all(r.status == 429 and r.headers["Retry-After"] == "1" for r in refused)


def watch_group(handles: list[Any]) -> list[str]:
    """Record every moment two of ``handles`` are resident together (their states
    or a reservation), checked at each state change of any of them."""
    overlaps: list[str] = []

    def on_state(handle: Any, old: WorkerState, new: WorkerState) -> None:
        resident = [h.name for h in handles if h.reserved or h.state in RESIDENT]
        if len(resident) > 1:
            overlaps.append(f"{handle.name} {old.public}→{new.public}: {resident}")

    for handle in handles:
        handle.on_state = on_state
    return overlaps


async def test_group_member_waits_for_a_starting_or_busy_one(make_registry: Any) -> None:
    registry = await make_registry(
        {"model_path": "fake/slow-start", "served_model_name": "a", "group": "g"},
        model("b", group="g"),
        memory_budget="100GB",
        min_resident_seconds=600,
    )
    a, b = registry.handles
    overlaps = watch_group([a, b])
    loading_a = asyncio.create_task(run(a, chat("first a")))
    await wait_for(lambda: a.state is WorkerState.STARTING)
    wanting_b = asyncio.create_task(run(b, chat("then b")))  # while a is STARTING
    assert (await asyncio.wait_for(loading_a, 10))[0] == "first a "
    assert (await asyncio.wait_for(wanting_b, 10))[0] == "then b "
    assert a.state is WorkerState.STOPPED and b.state is WorkerState.READY
    # b busy: an admin load of a waits for b (it may not start beside it).
    busy = await hold(b, "busy-b")
    loading = asyncio.create_task(registry.load("a"))
    await wait_for(lambda: registry.placement.waiting_for_room() == ["a"])
    assert not loading.done() and a.state is WorkerState.STOPPED
    busy.cancel()
    await asyncio.gather(busy, return_exceptions=True)
    await asyncio.wait_for(loading, 10)
    assert a.state is WorkerState.READY and b.state is WorkerState.STOPPED
    assert overlaps == []


async def test_a_replaced_model_still_finishing_counts_for_its_group(make_registry: Any) -> None:
    registry = await make_registry(
        model("a", group="g"), model("b", group="g"), memory_budget="100GB", queue_timeout=1
    )
    a, b = registry.handles
    busy = await hold(a, "old-a")
    # A reload changes a: the old worker finishes its request before it stops.
    await registry.reload(fake_config(model("a", group="g", aliases=["a2"]), model("b", group="g")))
    new_b = registry.resolve("b")
    assert new_b is b
    # The old a is still resident and busy: b may not start beside it.
    with pytest.raises(ModelUnavailable, match="held by busy models: 'a'") as info:
        await run(b, chat("b"))
    assert info.value.code == "no_capacity"
    assert b.state is WorkerState.STOPPED
    busy.cancel()
    await asyncio.gather(busy, return_exceptions=True)
    await wait_for(lambda: a.state is WorkerState.STOPPED)
    assert (await run(b, chat("b now")))[0] == "b now "
