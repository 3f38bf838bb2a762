"""The real supervisor (relay, handle, registry, reaper) against the fake worker."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest

from mlx_gateway.protocol.messages import Chunk
from mlx_gateway.supervisor.errors import (
    GatewayError,
    ModelNotFound,
    ModelUnavailable,
    WorkerCrashed,
)
from mlx_gateway.supervisor.pool.reaper import reapable
from mlx_gateway.supervisor.pool.state import WorkerState

from ..fakes import alive, chat, reached_worker, run, wait_for

pytestmark = pytest.mark.slow


async def test_on_demand_start_generate_and_stop(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/ok", "aliases": ["okay"]})
    handle = registry.resolve("okay")
    assert handle is registry.resolve("fake/ok")
    assert handle.state is WorkerState.STOPPED and handle.pid is None
    text, done = await run(handle, chat("one two three"))
    assert text == "one two three "
    assert done.finish_reason == "stop" and done.usage.completion_tokens == 3
    assert handle.state is WorkerState.READY and alive(handle.pid)
    assert handle.status().state == "ready" and handle.status().context_length == 256
    pid = handle.pid
    await handle.stop()
    assert handle.state is WorkerState.STOPPED
    assert not alive(pid)


async def test_unknown_model_lists_served_names(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/ok"}, {"model_path": "fake/slow-start"})
    with pytest.raises(ModelNotFound) as info:
        registry.resolve("nope")
    assert info.value.status == 404
    assert "fake/ok" in info.value.message and "fake/slow-start" in info.value.message


async def test_concurrent_callers_share_one_start(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/slow-start"})
    handle = registry.resolve("fake/slow-start")
    task = asyncio.create_task(handle.ensure_ready())
    await wait_for(lambda: handle.state is WorkerState.STARTING)
    assert handle.status().state == "loading"
    results = await asyncio.gather(
        *(run(handle, chat(f"w{i}", request_id=f"r{i}")) for i in range(5))
    )
    await task
    assert [text for text, _ in results] == [f"w{i} " for i in range(5)]
    assert handle.process.generation == 1  # exactly one process was started


async def test_max_tokens_gives_length(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/ok"})
    text, done = await run(registry.resolve("fake/ok"), chat("a b c d e f", max_tokens=2))
    assert text == "a b " and done.finish_reason == "length"


async def test_load_error_is_reported_and_backs_off(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/load-error"})
    handle = registry.resolve("fake/load-error")
    with pytest.raises(ModelUnavailable) as info:
        await handle.ensure_ready()
    assert info.value.status == 503
    assert "download failed: offline" in info.value.message
    assert handle.state is WorkerState.FAILED
    assert handle.status().state == "failed"
    # Within the backoff the next request fails at once, without a new process.
    started = time.monotonic()
    with pytest.raises(ModelUnavailable, match="next attempt"):
        await handle.ensure_ready()
    assert time.monotonic() - started < 0.5
    assert handle.process.generation == 1


async def test_death_during_load_names_signal_and_log(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/die-on-load"})
    with pytest.raises(ModelUnavailable) as info:
        await registry.resolve("fake/die-on-load").ensure_ready()
    assert "SIGKILL" in info.value.message
    assert "about to die while loading" in info.value.message


async def test_start_timeout(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/no-ready", "start_timeout": 1})
    handle = registry.resolve("fake/no-ready")
    started = time.monotonic()
    with pytest.raises(ModelUnavailable, match="start_timeout"):
        await handle.ensure_ready()
    assert time.monotonic() - started < 6
    assert handle.state is WorkerState.FAILED


async def test_crash_mid_stream_fails_at_once_and_next_request_restarts(
    make_registry: Any,
) -> None:
    registry = await make_registry({"model_path": "fake/ok"})
    handle = registry.resolve("fake/ok")
    await handle.ensure_ready()
    first_pid = handle.pid
    # A second request in flight on the same worker must fail too.
    bystander = asyncio.create_task(run(handle, chat("hang", request_id="other")))
    received: list[str] = []
    with pytest.raises(WorkerCrashed) as info:
        async with handle.session() as session:
            async for reply in session.generate(chat("crash now please")):
                if isinstance(reply, Chunk):
                    received.append(reply.text)
                    crash_seen_at = time.monotonic()
    assert time.monotonic() - crash_seen_at < 1.0
    assert len(received) == 3
    assert "SIGKILL" in info.value.message and "crashing on purpose" in info.value.message
    with pytest.raises(WorkerCrashed):
        await asyncio.wait_for(bystander, 1.0)
    assert handle.state is WorkerState.STOPPED
    text, _ = await run(handle, chat("back again"))
    assert text == "back again " and handle.pid != first_pid


async def test_worker_rejection_becomes_gateway_error(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/ok"})
    with pytest.raises(GatewayError) as info:
        await run(registry.resolve("fake/ok"), chat("reject this"))
    assert (info.value.status, info.value.param, info.value.code) == (
        400,
        "messages",
        "context_length_exceeded",
    )


async def test_leaving_early_cancels_in_the_worker(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/ok"})
    handle = registry.resolve("fake/ok")

    async def consume() -> None:
        async with handle.session() as session:
            async for _ in session.generate(chat("hang", request_id="to-cancel")):
                pass

    task = asyncio.create_task(consume())
    await wait_for(lambda: handle.inflight == 1 and handle.state is WorkerState.READY)
    await reached_worker(handle, "to-cancel")
    task.cancel()  # what Starlette does when the client disconnects
    with pytest.raises(asyncio.CancelledError):
        await task
    assert handle.inflight == 0
    await wait_for(lambda: "cancelled to-cancel" in handle.process.output())
    text, _ = await run(handle, chat("still serving"))
    assert text == "still serving "


async def test_stop_escalates_to_sigkill(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/ignore-sigterm"}, shutdown_grace=0.3)
    handle = registry.resolve("fake/ignore-sigterm")
    await handle.ensure_ready()
    pid = handle.pid
    started = time.monotonic()
    await handle.stop()
    assert not alive(pid)
    assert time.monotonic() - started < 8
    assert handle.state is WorkerState.STOPPED


async def test_request_during_stop_waits_and_restarts(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/ok"})
    handle = registry.resolve("fake/ok")
    await handle.ensure_ready()
    first = handle.pid
    stopping = asyncio.create_task(handle.stop())
    await asyncio.sleep(0)  # the stop command is posted first
    text, _ = await run(handle, chat("after stop"))
    await stopping
    assert text == "after stop " and handle.pid != first


async def test_idle_worker_is_reaped_after_the_last_request_ends(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/ok", "idle_timeout": 1})
    handle = registry.resolve("fake/ok")
    # A long stream (60 words at 20 ms each) outlives the idle timeout: no reaping meanwhile.
    text, _ = await run(handle, chat(" ".join(["w"] * 60)))
    assert len(text.split()) == 60
    pid = handle.pid
    ended = time.monotonic()
    assert alive(pid)
    await wait_for(lambda: handle.state is WorkerState.STOPPED, timeout=5)
    assert time.monotonic() - ended >= 0.9
    await wait_for(lambda: not alive(pid))
    text, _ = await run(handle, chat("again"))
    assert text == "again " and alive(handle.pid)


async def test_eager_model_starts_at_launch_and_is_not_reaped(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/ok", "on_demand": False, "idle_timeout": 1})
    handle = registry.resolve("fake/ok")
    await wait_for(lambda: handle.state is WorkerState.READY)
    # The reaper's decision with its clock an hour past the idle timeout: never an
    # eager model, but an on-demand one (so the check can fail).
    later = time.monotonic() + 3600
    assert not reapable(handle, later)
    handle.config.on_demand = True
    assert reapable(handle, later)
    handle.config.on_demand = False
    assert handle.state is WorkerState.READY


async def test_close_stops_every_worker(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/ok"}, {"model_path": "fake/slow-start"})
    a, b = registry.handles
    await a.ensure_ready()
    loading = asyncio.create_task(b.ensure_ready())
    await wait_for(lambda: b.state is WorkerState.STARTING)
    pids = [a.pid, b.pid]
    await registry.close()
    with pytest.raises(ModelUnavailable):
        await loading
    for pid in pids:
        assert not alive(pid)
    assert os.getpid() not in [p for p in pids]


async def test_a_crash_loop_ends_in_failed_with_the_reason(make_registry: Any) -> None:
    registry = await make_registry({"model_path": "fake/ok"})
    handle = registry.resolve("fake/ok")
    for i in range(3):
        with pytest.raises(WorkerCrashed):
            await run(handle, chat("crash", request_id=f"c{i}"))
    assert handle.state is WorkerState.FAILED
    status = handle.status()
    assert status.state == "failed" and status.crashes == 3
    assert "crash loop" in status.error and "SIGKILL" in status.error
    with pytest.raises(ModelUnavailable, match="crash loop"):
        await run(handle, chat("x"))
    await handle.load()  # an admin load clears the backoff
    assert (await run(handle, chat("fine now")))[0] == "fine now "
