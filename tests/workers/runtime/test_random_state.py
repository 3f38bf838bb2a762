"""A step that fails while ``mx.compile`` traces a sampler leaves MLX's random state
broken; the serve loop repairs it, so the failed request is the only one lost."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Sequence

import mlx.core as mx
import pytest
from mlx_lm.sample_utils import make_sampler

from mlx_gateway.protocol.messages import (
    Done,
    Error,
    Generate,
    ModelFacts,
    Reply,
    Request,
    SamplingParams,
    Shutdown,
    Usage,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.runtime.contract import Backend, Emit, InboxItem
from mlx_gateway.workers.runtime.random_state import repair_random_state
from mlx_gateway.workers.runtime.serve import serve


def _poison() -> None:
    """What a failed trace does: mlx-lm's compiled categorical sampler (it takes
    ``mx.random.state`` as input and output) traced with a temperature that is no
    number raises half-way."""
    with pytest.raises(TypeError):
        make_sampler(temp="hot")(mx.zeros((1, 8)))  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _whole_state_after() -> Iterator[None]:
    yield
    mx.random.seed(0)  # never leave a broken state to the tests that follow


def test_a_failed_trace_breaks_every_later_draw_until_repaired() -> None:
    _poison()
    with pytest.raises(RuntimeError, match="without a primitive"):
        mx.eval(mx.random.uniform(shape=(2,)))
    assert repair_random_state() is True
    mx.eval(make_sampler(temp=1.0)(mx.zeros((1, 8))))  # draws again
    assert repair_random_state() is False  # whole: left alone


class SamplingBackend(Backend):
    """Each request draws one token with mlx-lm's sampler at its temperature."""

    def __init__(self, emit: Emit) -> None:
        self.emit = emit
        self.waiting: list[Generate] = []

    def load(self, spec: WorkerSpec, emit: Emit) -> ModelFacts:
        return ModelFacts()

    def submit(self, request: Request, payloads: Sequence[bytes]) -> None:
        assert isinstance(request, Generate)
        self.waiting.append(request)

    def has_work(self) -> bool:
        return bool(self.waiting)

    def step(self) -> None:
        request = self.waiting[0]
        temp: object = request.sampling.temperature if request.prompt != "hot" else "hot"
        token = make_sampler(temp=temp)(mx.zeros((1, 8)))  # type: ignore[arg-type]
        self.waiting.pop(0)
        self.emit(
            Done(
                request_id=request.request_id,
                finish_reason="length",
                usage=Usage(completion_tokens=token.item()),
            )
        )

    def fail_active(self, message: str) -> None:
        for request in self.waiting:
            self.emit(Error(message=message, request_id=request.request_id, status=500))
        self.waiting.clear()

    def cancel(self, request_id: str) -> None: ...

    def cancel_all(self) -> None: ...

    def counts(self) -> tuple[int, int]:
        return len(self.waiting), 0

    def close(self) -> None: ...


def test_the_serve_loop_repairs_it_after_a_failed_step() -> None:
    inbox: queue.Queue[InboxItem] = queue.Queue()
    replies: list[Reply] = []
    backend = SamplingBackend(replies.append)
    sampled = SamplingParams(temperature=1.0, max_tokens=1)
    inbox.put((Generate(request_id="bad", prompt="hot", sampling=sampled), []))
    loop = threading.Thread(target=serve, args=(backend, inbox, replies.append))
    loop.start()
    try:
        for _ in range(200):
            if any(getattr(r, "request_id", "") == "bad" for r in replies):
                break
            threading.Event().wait(0.01)
        inbox.put((Generate(request_id="good", prompt="hi", sampling=sampled), []))
    finally:
        inbox.put((Shutdown(grace=5.0), []))
        loop.join(30)
    outcome = {getattr(r, "request_id", ""): r for r in replies if isinstance(r, Done | Error)}
    assert isinstance(outcome["bad"], Error) and "TypeError" in outcome["bad"].message
    assert isinstance(outcome["good"], Done), outcome["good"]
