"""The MLX-thread serve loop with a scripted backend (no MLX, no sockets)."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence

from mlx_gateway.protocol.messages import (
    Cancel,
    Done,
    Error,
    Generate,
    ModelFacts,
    Reply,
    Request,
    Shutdown,
    Usage,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.runtime.contract import (
    EXIT_OK,
    Abort,
    Backend,
    Emit,
    InboxItem,
    RequestError,
)
from mlx_gateway.workers.runtime.serve import serve
from mlx_gateway.workers.runtime.step_clock import StepClock


class ScriptedBackend(Backend):
    """Each request runs ``steps`` steps; prompts "reject"/"explode" fail on submit,
    "crash" fails its first step."""

    def __init__(self, emit: Emit, steps: int = 3) -> None:
        self.emit = emit
        self.steps = steps
        self.running: dict[str, int] = {}

    def load(self, spec: WorkerSpec, emit: Emit) -> ModelFacts:
        return ModelFacts()

    def submit(self, request: Request, payloads: Sequence[bytes]) -> None:
        assert isinstance(request, Generate)
        if request.prompt == "reject":
            raise RequestError("no such thing", param="prompt")
        if request.prompt == "explode":
            raise RuntimeError("boom")
        self.running[request.request_id] = -1 if request.prompt == "crash" else self.steps

    def cancel(self, request_id: str) -> None:
        if self.running.pop(request_id, None) is not None:
            self.emit(Done(request_id=request_id, finish_reason="cancelled"))

    def has_work(self) -> bool:
        return bool(self.running)

    def step(self) -> None:
        if any(left < 0 for left in self.running.values()):
            raise ValueError("bad step")
        for request_id in list(self.running):
            self.running[request_id] -= 1
            if self.running[request_id] == 0:
                del self.running[request_id]
                self.emit(Done(request_id=request_id, finish_reason="length", usage=Usage()))

    def fail_active(self, message: str) -> None:
        for request_id in self.running:
            self.emit(Error(message=message, request_id=request_id, status=500))
        self.running.clear()

    def cancel_all(self) -> None:
        for request_id in list(self.running):
            self.cancel(request_id)

    def counts(self) -> tuple[int, int]:
        return len(self.running), 0

    def close(self) -> None:
        pass


class StagedInbox(queue.Queue):
    """Hands out items in stages: a ``None`` ends a stage, so the loop runs at
    least one step before it sees the next stage's items."""

    def __init__(self, items: list[InboxItem | None]) -> None:
        super().__init__()
        self.items = list(items)

    def get(self, block: bool = True, timeout: float | None = None) -> InboxItem:
        while self.items and self.items[0] is None:
            self.items.pop(0)
        return self.get_nowait()

    def get_nowait(self) -> InboxItem:
        if not self.items or self.items[0] is None:
            if self.items:
                self.items.pop(0)
            raise queue.Empty
        item = self.items.pop(0)
        assert item is not None
        return item


def run(items: list[InboxItem | None], steps: int = 3) -> tuple[int, list[Reply]]:
    replies: list[Reply] = []
    code = serve(ScriptedBackend(replies.append, steps), StagedInbox(items), replies.append)
    return code, replies


def gen(request_id: str, prompt: str = "ok") -> InboxItem:
    return (Generate(request_id=request_id, prompt=prompt), [])


def ends(replies: list[Reply]) -> dict[str, Reply]:
    return {r.request_id: r for r in replies if isinstance(r, Done | Error)}


def test_rejections_and_failures_are_per_request() -> None:
    code, replies = run(
        [gen("bad", "reject"), gen("boom", "explode"), gen("ok"), (Shutdown(grace=10), [])]
    )
    assert code == EXIT_OK
    result = ends(replies)
    bad, boom, ok = result["bad"], result["boom"], result["ok"]
    assert isinstance(bad, Error) and (bad.status, bad.param) == (400, "prompt")
    assert isinstance(boom, Error) and boom.status == 500 and "boom" in boom.message
    assert isinstance(ok, Done) and ok.finish_reason == "length"


def test_a_failing_step_fails_its_requests_and_serving_goes_on() -> None:
    _, replies = run([gen("c", "crash"), gen("d"), None, gen("e"), (Shutdown(grace=10), [])])
    result = ends(replies)
    assert isinstance(result["c"], Error) and result["c"].status == 500
    assert "bad step" in result["c"].message
    # "d" was in the failed step, so it failed too; the request after it is served.
    assert isinstance(result["d"], Error)
    assert isinstance(result["e"], Done)


def test_shutdown_refuses_new_work_and_cancels_after_grace() -> None:
    code, replies = run([gen("slow"), None, (Shutdown(grace=0), []), gen("late")], steps=1000)
    assert code == EXIT_OK
    result = ends(replies)
    assert isinstance(result["late"], Error) and result["late"].status == 503
    assert isinstance(result["slow"], Done) and result["slow"].finish_reason == "cancelled"


def test_cancel_and_abort() -> None:
    cancels: list[InboxItem | None] = [(Cancel(request_id="a"), []), (Cancel(request_id="zz"), [])]
    code, replies = run([gen("a"), gen("b"), None, *cancels, None, Abort()], steps=1000)
    assert code == EXIT_OK
    result = ends(replies)
    assert result["a"].finish_reason == "cancelled"  # type: ignore[union-attr]
    assert result["b"].finish_reason == "cancelled"  # type: ignore[union-attr]
    assert "zz" not in result


class TickedBackend(ScriptedBackend):
    """Like rank 0 of a sharded model: ticked while idle."""

    idle_interval = 0.02

    def __init__(self, emit: Emit) -> None:
        super().__init__(emit)
        self.ticks = 0

    def idle_tick(self) -> None:
        self.ticks += 1


def test_an_idle_backend_with_idle_tick_is_ticked_and_still_served() -> None:
    replies: list[Reply] = []
    backend = TickedBackend(replies.append)
    inbox: queue.Queue[InboxItem] = queue.Queue()
    timer = threading.Timer(0.3, lambda: (inbox.put(gen("late")), inbox.put((Shutdown(10), []))))
    timer.start()
    try:
        code = serve(backend, inbox, replies.append)
    finally:
        timer.cancel()
    assert code == EXIT_OK
    assert backend.ticks >= 3  # about 15 in 0.3 s; a loaded machine ticks fewer
    assert isinstance(ends(replies)["late"], Done)


class BlockingBackend(ScriptedBackend):
    """Its first step blocks until released (a forward pass that never returns)."""

    def __init__(self, emit: Emit) -> None:
        super().__init__(emit, steps=2)
        self.entered = threading.Event()
        self.release = threading.Event()

    def step_label(self) -> str:
        return f"decode of {len(self.running)} requests"

    def step(self) -> None:
        self.entered.set()
        self.release.wait(30)
        super().step()


def test_the_step_clock_shows_a_blocked_step_and_counts_finished_ones() -> None:
    """What the heartbeats report while the MLX thread is inside a step: its label
    and a growing time without progress; once it ends, the finished count."""
    replies: list[Reply] = []
    backend = BlockingBackend(replies.append)
    inbox: queue.Queue[InboxItem] = queue.Queue()
    clock = StepClock()
    thread = threading.Thread(target=serve, args=(backend, inbox, replies.append, clock))
    thread.start()
    try:
        inbox.put(gen("a"))
        assert backend.entered.wait(10)
        first = clock.snapshot()
        assert first.current == "decode of 1 requests"
        assert first.steps == 1  # the request's checks were one step
        time.sleep(0.3)  # not a wait: time without progress, what the clock measures
        later = clock.snapshot()
        assert later.current == first.current and later.stalled_for >= 0.3
    finally:
        backend.release.set()
        inbox.put(Abort())
        thread.join(10)
    done = clock.snapshot()
    assert done.current == "" and done.stalled_for == 0 and done.steps >= 2
    assert done.longest >= 0.3


def test_a_reply_inside_a_step_is_progress() -> None:
    clock = StepClock()
    clock.begin("diffusion")
    time.sleep(0.2)  # not a wait: the clock measures it
    clock.progressed()
    assert clock.snapshot().stalled_for < 0.2
    clock.end()
    clock.begin("load", measured=False)
    time.sleep(0.3)  # not a wait: the clock measures it
    clock.end()
    assert 0.2 <= clock.longest < 0.3  # the load does not count
