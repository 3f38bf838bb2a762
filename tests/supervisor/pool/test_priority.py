"""Priority in the gateway's pool, over real ZeroMQ: a model's queue hands a freed
slot to an interactive request before a batch one (the fake worker), and batch work
on one worker takes no step while an interactive request runs on another (a real
embeddings worker beside the fake language model, read on its heartbeats' step
counter, never by time)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mlx_gateway.protocol.messages import BATCH, INTERACTIVE, Batch, Chunk, Embed, Priority
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.engine.embeddings import embed
from mlx_gateway.supervisor.pool.handle import WorkerHandle
from mlx_gateway.supervisor.pool.interactive import BATCH_DUTY
from mlx_gateway.supervisor.pool.registry import Registry
from mlx_gateway.supervisor.pool.spawn import worker_command

from ..fakes import chat, fake_command, make_registry, reached_worker, wait_for, worker_output

__all__ = ["make_registry"]


async def hold(handle: WorkerHandle, request_id: str, priority: Priority) -> None:
    """A ``hang`` request of ``priority``, held until cancelled."""
    async with handle.session(priority) as session:
        async for _ in session.generate(chat("hang", request_id=request_id)):
            pass


async def release(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_a_freed_slot_goes_to_the_interactive_request_first(make_registry) -> None:  # type: ignore[no-untyped-def]
    registry = await make_registry({"model_path": "fake/ok", "max_concurrency": 1})
    handle = registry.resolve("fake/ok")
    first = asyncio.create_task(hold(handle, "first", BATCH))
    await reached_worker(handle, "first")
    names = ["b1", "b2", "i1"]
    tasks = {}
    for request_id, priority in zip(names, [BATCH, BATCH, INTERACTIVE], strict=True):
        tasks[request_id] = asyncio.create_task(hold(handle, request_id, priority))
        count = len(tasks)
        await wait_for(lambda: handle.admission.waiting == count)  # noqa: B023 (awaited here)
    await release(first)
    order: list[str] = []

    def admitted() -> list[str]:
        return [r for r in names if r not in order and f"hanging {r}" in worker_output(handle)]

    for _ in names:  # each one admitted in turn (one slot), then released
        await wait_for(lambda: bool(admitted()))
        (running,) = admitted()
        order.append(running)
        await release(tasks[running])
    assert order == ["i1", "b1", "b2"]


def real_embeddings(spec: WorkerSpec, endpoint: str) -> list[str]:
    """The real worker for the embeddings model, the fake one for the language model."""
    if spec.kind == "embeddings":
        return worker_command(spec, endpoint)
    return fake_command(spec, endpoint)


@pytest.fixture
async def pair(tiny_bert_path: Path) -> AsyncIterator[Registry]:
    config = GatewayConfig(
        server=ServerConfig(shutdown_grace=1.0, hang_timeout=2.0),  # heartbeats every 0.5 s
        models=[
            model_entry(
                model_path=str(tiny_bert_path),
                served_model_name="bert",
                model_type="embeddings",
                max_batch_tokens=16,  # one or two inputs per step: a flood takes many
            ),
            model_entry(model_path="fake/ok", served_model_name="chat"),
        ],
    )
    registry = Registry(config, command=real_embeddings)
    await registry.start()
    try:
        yield registry
    finally:
        await registry.close()


async def steps_after_heartbeats(handle: WorkerHandle, beats: int = 2) -> int:
    """The worker's finished steps as of ``beats`` heartbeats from now."""
    for _ in range(beats):
        seen = handle.last_heartbeat
        await wait_for(lambda: handle.last_heartbeat > seen, timeout=10)  # noqa: B023
    assert handle.step is not None
    return handle.step.steps


@pytest.mark.slow
async def test_batch_work_takes_no_step_while_interactive_work_runs_elsewhere(
    pair: Registry,
) -> None:
    bert, lm = pair.resolve("bert"), pair.resolve("chat")
    await asyncio.gather(bert.ensure_ready(), lm.ensure_ready())
    texts = [f"input number {i} of the flood" for i in range(60)]
    held = asyncio.create_task(hold(lm, "person", INTERACTIVE))
    await reached_worker(lm, "person")
    assert pair.interactive.running == 1 and not pair.interactive.held  # no batch work yet

    # Interactive embeddings are not held: they run beside the person's request.
    _, _, tokens = await embed(bert, Embed(request_id="mine", texts=texts))
    assert tokens > 0

    flood = asyncio.create_task(embed(bert, Embed(request_id="flood", texts=texts, priority=BATCH)))
    await wait_for(lambda: bert.admission.inflight == 1)
    assert pair.interactive.held
    before = await steps_after_heartbeats(bert)  # its checks ran: it waits between steps
    later = await steps_after_heartbeats(bert, beats=3)
    assert later == before, "the batch worker took steps while interactive work ran"
    assert not flood.done()

    started = time.monotonic()
    await release(held)
    assert not pair.interactive.held
    _, _, flood_tokens = await asyncio.wait_for(flood, timeout=30)
    assert flood_tokens == tokens
    assert await steps_after_heartbeats(bert, beats=1) >= later + 30  # 60 inputs, ≤ 2 per step
    assert time.monotonic() - started < 30


async def first_token(handle: WorkerHandle, request_id: str, got: asyncio.Event) -> None:
    """A ``drip`` request (one chunk, then nothing): ``got`` is set at its first chunk,
    and the request is held until cancelled, as a person reading a long answer."""
    async with handle.session(INTERACTIVE) as session:
        async for reply in session.generate(chat("drip", request_id=request_id)):
            if isinstance(reply, Chunk | Batch):
                got.set()


@pytest.mark.slow
async def test_batch_work_goes_on_at_its_duty_once_the_person_has_a_first_token(
    pair: Registry,
) -> None:
    bert, lm = pair.resolve("bert"), pair.resolve("chat")
    await asyncio.gather(bert.ensure_ready(), lm.ensure_ready())
    texts = [f"input number {i} of the flood" for i in range(30)]
    got = asyncio.Event()
    person = asyncio.create_task(first_token(lm, "person", got))
    await asyncio.wait_for(got.wait(), timeout=10)
    assert pair.interactive.running == 1 and pair.interactive.starting == 0

    flood = asyncio.create_task(embed(bert, Embed(request_id="flood", texts=texts, priority=BATCH)))
    await wait_for(lambda: pair.interactive.held)
    assert pair.interactive.current_duty == BATCH_DUTY
    # The person's request still runs, and the flood ends meanwhile: held at its duty,
    # not to the person's last token.
    _, _, tokens = await asyncio.wait_for(flood, timeout=60)
    assert tokens > 0
    assert not person.done() and pair.interactive.held is False  # no batch work left
    assert pair.interactive.running == 1
    await release(person)
    assert pair.interactive.running == 0
