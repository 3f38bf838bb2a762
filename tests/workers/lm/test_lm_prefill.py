"""Long prompts on a slow machine: prefill in short slices, progress, prompt cancels.

The real worker runs the tiny llama with its prefill capped at
``MLX_GATEWAY_TEST_PREFILL_TPS`` tokens per second (each slice is stretched with a
sleep, as on a slow machine): a 1,800-token prompt then takes about 9 s to read.
The worker must size its slices to that measured speed, report the progress
(``Prefilled``), and stop a cancelled prompt within one slice, so that the next
request waits far less than the rest of the prefill; what it read stays in the
prompt cache.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlx_gateway.protocol.messages import Cancel, Done, Prefilled, Ready, Started
from mlx_gateway.workers.lm.prefill_pace import (
    FIXED_SHARE,
    THROTTLE_ENV,
    WINDOW,
    PrefillPace,
    fit,
)

from ..harness import WorkerHarness

pytestmark = pytest.mark.slow

TOKENS_PER_SECOND = 200
LONG = [10 + i % 200 for i in range(1800)]  # ≈ 9 s of prefill at that speed
FULL_PREFILL = len(LONG) / TOKENS_PER_SECOND
QUICK = 3.0
"""Generous bound on the short request's whole time after the cancel (a slice is
about 0.25 s; the rest of the long prefill would take 7 s or more)."""


@pytest.fixture
def worker(tiny_lm_path: Path, tmp_path: Path) -> Iterator[WorkerHarness]:
    harness = WorkerHarness(
        tmp_path,
        tiny_lm_path,
        env={THROTTLE_ENV: str(TOKENS_PER_SECOND)},
        max_concurrency=4,
    )
    harness.wait_other(Ready)
    yield harness
    harness.close()


def progress(worker: WorkerHarness, request_id: str) -> list[Prefilled]:
    return [m for m in worker.others if isinstance(m, Prefilled) and m.request_id == request_id]


def wait_progress(worker: WorkerHarness, request_id: str, at_least: int = 2) -> list[Prefilled]:
    return worker.wait_for(
        lambda: len(progress(worker, request_id)) >= at_least and progress(worker, request_id),
        timeout=60,
        what=f"prefill progress of {request_id}",
    )


def short_request_seconds(worker: WorkerHarness) -> float:
    started = time.monotonic()
    worker.generate("short", content="hi", max_tokens=3, temperature=0)
    events = worker.finished("short", timeout=60)
    assert isinstance(events[-1], Done) and events[-1].finish_reason == "length"
    return time.monotonic() - started


def test_a_cancelled_prompt_frees_a_solo_worker_within_a_slice(worker: WorkerHarness) -> None:
    worker.generate("long", raw_prompt=LONG, max_tokens=4)
    seen = wait_progress(worker, "long", at_least=3)
    started = worker.events["long"][0]
    assert isinstance(started, Started) and started.prompt_tokens == len(LONG)
    assert all(p.total == len(LONG) for p in seen)
    assert [p.done for p in seen] == sorted({p.done for p in seen})  # it moves on
    assert seen[-1].done < len(LONG) / 2  # cancelled early in the prompt
    worker.send(Cancel(request_id="long"))
    waited = short_request_seconds(worker)
    done = worker.finished("long")[-1]
    assert isinstance(done, Done) and done.finish_reason == "cancelled"
    assert waited < QUICK, f"the next request waited {waited:.1f} s (full prefill {FULL_PREFILL} s)"
    assert resumed_from(worker, LONG[: seen[-1].done + 20]) >= seen[-1].done


def resumed_from(worker: WorkerHarness, prompt: list[int]) -> int:
    """The prompt-cache tokens a request for ``prompt`` starts from."""
    worker.generate("again", raw_prompt=prompt, max_tokens=1)
    done = worker.finished("again")[-1]
    assert isinstance(done, Done), done
    return done.usage.cached_tokens


def test_cancelled_prompts_free_the_batch_within_a_slice(worker: WorkerHarness) -> None:
    # Two long prompts at once: the second arrival moves the first into the batch,
    # where both prefill side by side (the clients of the issue, which had left).
    worker.generate("long-a", raw_prompt=LONG, max_tokens=4)
    worker.generate("long-b", raw_prompt=LONG[::-1], max_tokens=4)
    wait_progress(worker, "long-a")
    seen = wait_progress(worker, "long-b")
    assert seen[-1].done < len(LONG) / 2
    worker.send(Cancel(request_id="long-a"))
    worker.send(Cancel(request_id="long-b"))
    waited = short_request_seconds(worker)
    for request_id in ("long-a", "long-b"):
        done = worker.finished(request_id)[-1]
        assert isinstance(done, Done) and done.finish_reason == "cancelled"
    assert waited < QUICK, f"the next request waited {waited:.1f} s (full prefill {FULL_PREFILL} s)"
    # What was read stays in the prompt cache: the same prompt sent again resumes.
    assert resumed_from(worker, LONG[::-1][: seen[-1].done + 20]) >= seen[-1].done


def test_the_slice_follows_the_measured_speed() -> None:
    pace = PrefillPace(2048, seconds=0.25)
    assert pace.slice() == 4  # nothing measured yet: a short first slice
    pace.done(16, 0.1)  # 160 tokens/s
    assert pace.slice() in (30, 50)  # 0.25 s at 160 tokens/s (40), a quarter above or below
    assert pace.slice(rows=2) in (15, 25)  # two prompts share the step
    for tokens in (50, 30, 50, 30):  # the same speed at every size: no fixed part
        pace.done(tokens, tokens / 160)
    assert pace.fixed == pytest.approx(0.0, abs=1e-9)
    assert pace.rate == pytest.approx(160)
    assert [pace.slice(), pace.slice()] == [50, 50]  # one side until the next step
    pace.done(50, 50 / 160)
    assert pace.slice() == 30  # and the other side after it
    for _ in range(WINDOW):  # a much faster machine
        pace.done(4000, 0.01)
    assert pace.slice() == 2048  # never more than prefill_step_size, and no alternating there


def test_a_step_s_fixed_cost_does_not_shrink_the_slices() -> None:
    """A real model on a CPU: every prefill step costs 0.12 s whatever it reads (a
    pass over the weights), plus 4 ms per prompt token. Sized by the average speed,
    8 prompts read 3 or 4 tokens each per step, three quarters of it fixed cost."""
    fixed, per_token, rows = 0.12, 0.004, 8
    pace = PrefillPace(2048, seconds=0.25)
    read = []
    for _ in range(12):
        tokens = pace.slice(rows) * rows
        pace.done(tokens, fixed + per_token * tokens)
        read.append(tokens)
    assert pace.fixed == pytest.approx(fixed)
    assert 1 / pace.rate == pytest.approx(per_token)
    aimed = FIXED_SHARE * fixed / per_token  # the prompt work is 3x the fixed part
    assert sum(read[-4:]) / 4 == pytest.approx(aimed, rel=0.1)
    assert max(read) < 2 * aimed  # no step far past it
    # What the heartbeat reports: a long prompt read in 2,048-token steps, each
    # paying the fixed part once (not the 250 tokens/s of the cost per token alone).
    assert pace.tokens_per_second() == pytest.approx(2048 / (fixed + 2048 * per_token))
    assert PrefillPace(2048).tokens_per_second() == 0.0  # nothing measured yet


def test_the_fit_tells_a_fixed_cost_from_a_cost_per_token() -> None:
    assert fit([(10, 0.5), (20, 0.6), (40, 0.8)]) == pytest.approx((0.4, 0.01))
    assert fit([(10, 0.1), (20, 0.2)]) == pytest.approx((0.0, 0.01))  # too few steps
    assert fit([(10, 0.1), (10, 0.3), (10, 0.2)]) == pytest.approx((0.0, 0.02))  # one size
    # bigger steps measured faster (noise): no fit, the average
    assert fit([(10, 0.5), (20, 0.4), (40, 0.3)]) == pytest.approx((0.0, 1.2 / 70))
