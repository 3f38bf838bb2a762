"""The real worker process over a real ROUTER socket, with the tiny model."""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from tokenizers import Tokenizer

from mlx_gateway.protocol.messages import (
    Cancel,
    Chunk,
    Done,
    Error,
    Heartbeat,
    Ping,
    Progress,
    Ready,
    Shutdown,
    Started,
)
from mlx_gateway.workers.runtime.contract import EXIT_LOAD_FAILED, EXIT_OK

from ..harness import WorkerHarness, text_of

pytestmark = pytest.mark.slow

PROMPT_TEMPLATE = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def worker(tiny_lm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerHarness]:
    """One worker shared by the tests that leave it serving."""
    harness = WorkerHarness(
        tmp_path_factory.mktemp("worker"),
        tiny_lm_path,
        max_concurrency=3,
        heartbeat_interval=0.5,
        # One chunk per step, whatever the machine's speed: the stop-string test
        # builds its stop from the text of two successive tokens.
        options={"stream_interval": 0},
    )
    harness.wait_other(Ready)
    yield harness
    harness.close()


@pytest.fixture
def own_worker(tiny_lm_path: Path, tmp_path: Path) -> Iterator[WorkerHarness]:
    """A worker for a test that stops it."""
    harness = WorkerHarness(tmp_path, tiny_lm_path, heartbeat_interval=0.5)
    harness.wait_other(Ready)
    yield harness
    harness.close()


def prompt_tokens(model: Path, content: str) -> int:
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    return len(tokenizer.encode(PROMPT_TEMPLATE.format(content)).ids)


def greedy(worker: WorkerHarness, request_id: str, max_tokens: int, **kw: object) -> list:
    worker.generate(request_id, temperature=0.0, max_tokens=max_tokens, **kw)
    return worker.finished(request_id)


# ---------------------------------------------------------------- start


def test_ready_reports_the_model(worker: WorkerHarness) -> None:
    ready = worker.wait_other(Ready)
    assert ready.pid == worker.proc.pid
    assert ready.facts.context_length == 2048
    assert ready.facts.model_type == "llama"
    assert ready.facts.load_seconds > 0
    assert ready.memory.rss > 0
    stages = [m.stage for m in worker.others if isinstance(m, Progress)]
    assert stages[0] == "load"
    assert worker.others.index(ready) > worker.others.index(
        next(m for m in worker.others if isinstance(m, Progress))
    )
    # Its log says where the start went, phase by phase, and that the weights were
    # read ahead, all of them (the tiny model is far below the limit), during the imports.
    line = next(line for line in worker.stderr().splitlines() if "ready: " in line)
    phases = re.search(
        r"\(interpreter and runtime ([\d.]+) s, lm backend imports ([\d.]+) s, "
        r"load ([\d.]+) s; weights read ahead ([\d.]+) of ([\d.]+) MiB in ([\d.]+) s\)",
        line,
    )
    assert phases is not None, line
    runtime, imports, load, read, total, _reading = (float(x) for x in phases.groups())
    assert min(runtime, imports, load) > 0, line
    assert read == total > 0, line


def test_heartbeats_and_ping(worker: WorkerHarness) -> None:
    worker.wait_for(
        lambda: sum(isinstance(m, Heartbeat) for m in worker.others) >= 2, 5, "heartbeats"
    )
    before = len(worker.others)
    worker.send(Ping())
    start = time.monotonic()
    beat = worker.wait_for(
        lambda: next((m for m in worker.others[before:] if isinstance(m, Heartbeat)), None),
        2,
        "a heartbeat",
    )
    assert time.monotonic() - start < 0.5
    assert beat.memory.rss > 0


# ---------------------------------------------------------------- generation


def test_chat_streams_started_chunks_done(worker: WorkerHarness, tiny_lm_path: Path) -> None:
    events = greedy(worker, "chat-1", 12)
    started, *chunks, done = events
    assert isinstance(started, Started)
    assert started.prompt_tokens == prompt_tokens(tiny_lm_path, "hello world")
    assert chunks and all(isinstance(c, Chunk) for c in chunks)
    assert isinstance(done, Done)
    assert done.finish_reason == "length"
    assert done.usage.prompt_tokens == started.prompt_tokens
    assert done.usage.completion_tokens == 12
    assert sum(c.tokens for c in chunks) <= 12
    assert text_of(events)


def test_temperature_zero_is_deterministic(worker: WorkerHarness) -> None:
    first = text_of(greedy(worker, "det-1", 30, content="The quick"))
    second = text_of(greedy(worker, "det-2", 30, content="The quick"))
    assert first == second


def test_seed_reproduces_sampled_text(worker: WorkerHarness) -> None:
    texts = []
    for i in range(2):
        worker.generate(f"seed-{i}", temperature=1.0, seed=1234, max_tokens=30)
        texts.append(text_of(worker.finished(f"seed-{i}")))
    assert texts[0] == texts[1]


def test_eos_finishes_with_stop(worker: WorkerHarness) -> None:
    # At temperature 1 the random model reaches EOS now and then; seeds make it repeatable.
    ids = [f"eos-{seed}" for seed in range(8)]
    for seed, request_id in enumerate(ids):
        worker.generate(request_id, temperature=1.0, seed=seed, max_tokens=100)
    ends = [worker.finished(i)[-1] for i in ids]
    stopped = [e for e in ends if isinstance(e, Done) and e.finish_reason == "stop"]
    assert stopped, [e.usage.completion_tokens for e in ends]
    assert all(e.usage.completion_tokens < 100 for e in stopped)
    for request_id in ids:
        assert "<|im_end|>" not in text_of(worker.events[request_id])


def test_concurrent_requests_are_batched(worker: WorkerHarness) -> None:
    ids = [f"conc-{i}" for i in range(3)]
    for n, request_id in enumerate(ids):
        worker.generate(request_id, temperature=0.7, max_tokens=20 + n, content=f"story {n}")
    batches_before = len(worker.batches)
    for n, request_id in enumerate(ids):
        done = worker.finished(request_id)[-1]
        assert isinstance(done, Done)
        if done.finish_reason == "length":
            assert done.usage.completion_tokens == 20 + n
    assert max(len(b.chunks) for b in worker.batches[batches_before:]) > 1


def test_request_inserted_mid_flight(worker: WorkerHarness) -> None:
    worker.generate("long", temperature=0.0, max_tokens=400)
    worker.wait_for(lambda: len(worker.events["long"]) > 5, 10, "the long request to run")
    worker.generate("late", temperature=0.0, max_tokens=5)
    late = worker.finished("late")
    assert isinstance(late[-1], Done) and late[-1].usage.completion_tokens == 5
    assert not isinstance(worker.events["long"][-1], Done), "late should end before long"
    assert worker.finished("long")[-1].usage.completion_tokens == 400


def test_a_lone_request_joined_by_another_keeps_its_text(worker: WorkerHarness) -> None:
    # Alone, a request decodes outside the batch; when a second one arrives it moves
    # into the batch with its cache. Greedy text must not change either way.
    alone_first = greedy(worker, "ref-first", 200, content="Tell me a long story")
    alone_second = greedy(worker, "ref-second", 20, content="Count the steps")
    worker.generate("first", temperature=0.0, max_tokens=200, content="Tell me a long story")
    worker.wait_for(lambda: len(worker.events["first"]) > 3, 10, "the first request to run")
    worker.generate("second", temperature=0.0, max_tokens=20, content="Count the steps")
    second = worker.finished("second")
    first = worker.finished("first")
    assert text_of(second) == text_of(alone_second)
    assert text_of(first) == text_of(alone_first)
    assert first[-1].usage.completion_tokens == alone_first[-1].usage.completion_tokens


def test_max_tokens_ends_with_length(worker: WorkerHarness) -> None:
    done = greedy(worker, "len-7", 7)[-1]
    assert isinstance(done, Done)
    assert (done.finish_reason, done.usage.completion_tokens) == ("length", 7)


def test_stop_string_split_across_tokens_never_leaks(worker: WorkerHarness) -> None:
    events = greedy(worker, "stop-ref", 40, content="Tell me a story")
    chunks = [e.text for e in events if isinstance(e, Chunk)]
    full = "".join(chunks)
    # A stop string that straddles a token boundary: end of one chunk, start of the next.
    k = next(i for i in range(3, len(chunks) - 1) if len(chunks[i] + chunks[i + 1]) >= 3)
    stop = chunks[k][-2:] + chunks[k + 1][:2]
    expected = full[: full.find(stop)]

    events = greedy(worker, "stop-cut", 40, content="Tell me a story", stop=[stop, "\x00never"])
    done = events[-1]
    assert isinstance(done, Done) and done.finish_reason == "stop"
    assert text_of(events) == expected
    assert done.usage.completion_tokens < 40


def test_raw_prompt_completion(worker: WorkerHarness) -> None:
    worker.generate("raw-ids", raw_prompt=[10, 20, 30, 40], temperature=0.0, max_tokens=3)
    started, *_, done = worker.finished("raw-ids")
    assert isinstance(started, Started) and started.prompt_tokens == 4
    assert isinstance(done, Done)
    # Greedy may pick EOS right away for an arbitrary prompt: "stop" early is fine.
    assert done.usage.completion_tokens == 3 or done.finish_reason == "stop"


def test_penalties_are_accepted(worker: WorkerHarness) -> None:
    worker.generate(
        "pen",
        temperature=0.0,
        max_tokens=10,
        presence_penalty=1.0,
        frequency_penalty=0.5,
        repetition_penalty=1.1,
    )
    assert worker.finished("pen")[-1].usage.completion_tokens == 10


# ---------------------------------------------------------------- errors


def test_context_overflow_is_rejected_before_started(worker: WorkerHarness) -> None:
    worker.generate("too-long", content="hello world " * 2000, max_tokens=10)
    (error,) = worker.finished("too-long")
    assert isinstance(error, Error)
    assert (error.status, error.type, error.param, error.code) == (
        400,
        "invalid_request_error",
        "messages",
        "context_length_exceeded",
    )
    assert "maximum context length is 2048 tokens" in error.message


def test_bad_parameter_is_a_400(worker: WorkerHarness) -> None:
    worker.generate("bad-temp", temperature=-1.0)
    (error,) = worker.finished("bad-temp")
    assert isinstance(error, Error) and error.status == 400 and error.param == "temperature"


def test_malformed_messages_do_not_kill_the_worker(worker: WorkerHarness) -> None:
    worker.send_raw(b"\xff\x00garbage")
    worker.send_raw()
    worker.send_raw(msgspec.msgpack.encode({"op": "no-such-op"}))
    # A Generate with a wrong field type still names its request: it gets a 400.
    worker.send_raw(msgspec.msgpack.encode({"op": "generate", "request_id": "typo", "sampling": 5}))
    (error,) = worker.finished("typo")
    assert isinstance(error, Error) and error.status == 400
    assert greedy(worker, "after-garbage", 3)[-1].usage.completion_tokens == 3
    assert worker.proc.poll() is None


# ---------------------------------------------------------------- cancel


def test_cancel_running_request(worker: WorkerHarness) -> None:
    worker.generate("to-cancel", temperature=0.0, max_tokens=1500)
    worker.wait_for(lambda: len(worker.events["to-cancel"]) > 3, 10, "a few chunks")
    start = time.monotonic()
    worker.send(Cancel(request_id="to-cancel"))
    done = worker.finished("to-cancel", timeout=5)[-1]
    assert time.monotonic() - start < 1.0
    assert isinstance(done, Done) and done.finish_reason == "cancelled"
    assert 0 < done.usage.completion_tokens < 1500
    # Cancelling it again, or an id never seen, is a no-op; the worker keeps serving.
    worker.send(Cancel(request_id="to-cancel"))
    worker.send(Cancel(request_id="never-seen"))
    assert greedy(worker, "after-cancel", 4)[-1].usage.completion_tokens == 4
    assert [e for e in worker.events["to-cancel"] if isinstance(e, Done)] == [done]
    assert "never-seen" not in worker.events


def test_cancel_queued_request(worker: WorkerHarness) -> None:
    ids = [f"busy-{i}" for i in range(3)]  # fill max_concurrency=3
    for request_id in ids:
        worker.generate(request_id, temperature=0.0, max_tokens=1500)
    worker.generate("queued", temperature=0.0, max_tokens=10)
    worker.wait_for(lambda: worker.events["queued"], 10, "queued to be accepted")
    worker.send(Cancel(request_id="queued"))
    events = worker.finished("queued", timeout=5)
    assert isinstance(events[0], Started)
    assert not [e for e in events if isinstance(e, Chunk)]
    assert isinstance(events[-1], Done) and events[-1].finish_reason == "cancelled"
    assert events[-1].usage.completion_tokens == 0
    for request_id in ids:
        worker.send(Cancel(request_id=request_id))
    for request_id in ids:
        assert worker.finished(request_id, timeout=5)[-1].finish_reason == "cancelled"


# ---------------------------------------------------------------- stopping


def test_shutdown_finishes_short_work_and_cancels_the_rest(own_worker: WorkerHarness) -> None:
    own_worker.generate("short", temperature=0.0, max_tokens=20)
    own_worker.generate("endless", temperature=0.0, max_tokens=2000)
    own_worker.wait_for(lambda: own_worker.events["endless"], 10, "endless to start")
    own_worker.send(Shutdown(grace=1.0))
    own_worker.generate("too-late", max_tokens=3)
    assert own_worker.finished("short")[-1].finish_reason == "length"
    assert own_worker.finished("endless", timeout=5)[-1].finish_reason == "cancelled"
    (late,) = own_worker.finished("too-late")
    assert isinstance(late, Error) and late.status == 503
    assert own_worker.wait_exit(5) == EXIT_OK


def test_sigterm_exits_promptly(own_worker: WorkerHarness) -> None:
    own_worker.generate("running", temperature=0.0, max_tokens=2000)
    own_worker.wait_for(lambda: len(own_worker.events["running"]) > 2, 10, "generation")
    start = time.monotonic()
    own_worker.proc.send_signal(signal.SIGTERM)
    assert own_worker.wait_exit(3) == EXIT_OK
    assert time.monotonic() - start < 2.0
    assert own_worker.finished("running", timeout=1)[-1].finish_reason == "cancelled"


def test_exits_when_the_parent_dies(tiny_lm_path: Path, tmp_path: Path) -> None:
    parent = subprocess.Popen(["sleep", "60"])
    harness = WorkerHarness(tmp_path, tiny_lm_path, parent_pid=parent.pid)
    try:
        harness.wait_other(Ready)
        parent.kill()  # not reaped yet: a zombie counts as gone
        start = time.monotonic()
        assert harness.wait_exit(5) == EXIT_OK
        assert time.monotonic() - start < 3.0
    finally:
        parent.kill()
        parent.wait()
        harness.close()


# ---------------------------------------------------------------- load failures


def test_offline_hub_model_fails_with_a_clear_reason(tmp_path: Path) -> None:
    harness = WorkerHarness(tmp_path, "nonexistent-org/nonexistent-model-7f3a")
    try:
        error = harness.wait_other(Error)
        assert error.request_id == "" and error.status == 503
        assert (
            "offline" in error.message and "nonexistent-org/nonexistent-model-7f3a" in error.message
        )
        assert harness.wait_exit(10) == EXIT_LOAD_FAILED
    finally:
        harness.close()


def test_local_dir_without_weights(tmp_path: Path) -> None:
    model = tmp_path / "empty-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    harness = WorkerHarness(tmp_path, model)
    try:
        error = harness.wait_other(Error)
        assert str(model) in error.message and "no weights" in error.message
        assert harness.wait_exit(10) == EXIT_LOAD_FAILED
    finally:
        harness.close()
