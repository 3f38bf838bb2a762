"""The one worker-call API (``pool.worker_call.WorkerCall``) on the real supervisor
against the fake worker over real ZeroMQ: the session is held for exactly the call,
a failure or a cancellation while waiting leaves nothing open, and leaving before
``Done`` cancels the request on the worker."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mlx_gateway.protocol.messages import Chunk, CountTokens, Done, Started
from mlx_gateway.supervisor.errors import GatewayError, ModelUnavailable
from mlx_gateway.supervisor.pool.handle import WorkerHandle
from mlx_gateway.supervisor.pool.state import WorkerState
from mlx_gateway.supervisor.pool.worker_call import WorkerCall

from ..fakes import barrier, chat, reached_worker, wait_for, worker_output

pytestmark = pytest.mark.slow


async def ready_handle(make_registry: Any) -> WorkerHandle:
    registry = await make_registry({"model_path": "fake/ok"})
    handle: WorkerHandle = registry.resolve("fake/ok")
    await handle.ensure_ready()
    return handle


async def test_a_scoped_call_reads_to_done_and_frees_its_slot(make_registry: Any) -> None:
    handle = await ready_handle(make_registry)
    replies: list[Any] = []
    async with WorkerCall(handle, chat("one two three", request_id="scoped")) as call:
        assert handle.inflight == 1
        async for reply in call:
            replies.append(reply)
    assert isinstance(replies[0], Started)
    assert "".join(r.text for r in replies if isinstance(r, Chunk)) == "one two three "
    assert isinstance(replies[-1], Done) and replies[-1].finish_reason == "stop"
    assert handle.inflight == 0
    await barrier(handle)  # all the worker was sent is handled and logged by now
    output = worker_output(handle)
    assert "cancelled barrier" in output  # a Cancel is logged (the check can fail)
    assert not [line for line in output if "scoped" in line]  # it finished: no Cancel


async def test_count_tokens_is_one_call_too(make_registry: Any) -> None:
    handle = await ready_handle(make_registry)
    msg = CountTokens(request_id="count-1", messages=[{"role": "user", "content": "a b c d"}])
    async with WorkerCall(handle, msg) as call:
        replies = [reply async for reply in call]
    assert [type(r) for r in replies] == [Done]
    assert replies[0].usage.prompt_tokens == 4 and handle.inflight == 0


async def test_a_rejection_before_the_first_reply_leaves_nothing_open(
    make_registry: Any,
) -> None:
    handle = await ready_handle(make_registry)
    call = WorkerCall(handle, chat("reject this"))
    with pytest.raises(GatewayError) as info:
        await call.first()
    assert (info.value.status, info.value.code) == (400, "context_length_exceeded")
    assert handle.inflight == 0
    await call.aclose()  # closing again is harmless
    assert handle.inflight == 0


async def test_cancelled_while_waiting_for_the_first_reply_cancels_on_the_worker(
    make_registry: Any,
) -> None:
    handle = await ready_handle(make_registry)
    call = WorkerCall(handle, chat("hang", request_id="waiting"))
    # A hanging request still sends Started: wait for a reply that never comes.
    task = asyncio.create_task(call.first(until=Chunk))
    await reached_worker(handle, "waiting")
    task.cancel()  # the client left
    with pytest.raises(asyncio.CancelledError):
        await task
    assert handle.inflight == 0
    await wait_for(lambda: "cancelled waiting" in worker_output(handle))


async def test_leaving_a_kept_call_early_cancels_it(make_registry: Any) -> None:
    handle = await ready_handle(make_registry)
    prepared: list[str] = []

    def prepare(msg: Any) -> Any:
        prepared.append(handle.state.value)  # completed once the model is ready
        return msg

    call = WorkerCall(handle, chat("hang", request_id="kept"), prepare=prepare)
    first = await call.first(until=Started)
    assert isinstance(first, Started) and prepared == [WorkerState.READY.value]
    assert handle.inflight == 1
    await call.aclose()
    assert handle.inflight == 0
    await wait_for(lambda: "cancelled kept" in worker_output(handle))
    with pytest.raises(ModelUnavailable) as info:
        await call.next()  # a closed call has no more replies
    assert info.value.code == "incomplete_generation"
    assert "ended the request without a result" in info.value.message
