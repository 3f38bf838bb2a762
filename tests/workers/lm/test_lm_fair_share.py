"""A batch prompt's prefill beside a person's answer on the same model, read on the
lm scheduler's recorded schedule (``FairShare.slices``, the ``Prefilled`` reports and
the chunks, in step order), never on timings.

The real scheduler runs the tiny llama in process, its prefill throttled to a machine
whose pass over the weights costs :data:`FIXED` seconds and that reads
:data:`TOKENS_PER_SECOND` prompt tokens a second beyond it (the pace then measures
exactly that machine). A batch request reads a long prompt in efficient slices; a
person's request arrives, gets its first token, and decodes: meanwhile every batch
slice is bounded (one pass and half of one), slices take at most a third of the time
(each followed by twice its time of decode-only steps), and the person's tokens come
between them; once the answer ends, slices are efficient again, and the batch request
generates exactly what it generates alone.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from mlx_gateway.protocol.messages import BATCH, Batch, Done, Generate, Prefilled, SamplingParams
from mlx_gateway.workers.lm.fair_share import SHARE, Slice
from mlx_gateway.workers.lm.prefill_pace import (
    BOUND_MARGIN,
    THROTTLE_ENV,
    THROTTLE_FIXED_ENV,
)
from mlx_gateway.workers.runtime.duty_cycle import rest_after

from ..lm_recorder import Recorder

FIXED = 0.05
TOKENS_PER_SECOND = 2000.0
MOST = 512
LONG = [10 + (i * 7) % 200 for i in range(1800)]
BOUNDED_MOST = round(BOUND_MARGIN * FIXED * TOKENS_PER_SECOND) + 1
"""The largest bounded slice on that machine: half a pass's time of prompt (and one
token for the fit's rounding)."""
BOUND_SECONDS = FIXED * (1 + BOUND_MARGIN) + 1 / TOKENS_PER_SECOND


@pytest.fixture(autouse=True)
def slow_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(THROTTLE_ENV, str(TOKENS_PER_SECOND))
    monkeypatch.setenv(THROTTLE_FIXED_ENV, str(FIXED))


def generate(
    recorder: Recorder, request_id: str, prompt: list[int], max_tokens: int, **kw: object
) -> None:
    sampling = SamplingParams(max_tokens=max_tokens, temperature=0.0)
    msg = Generate(request_id=request_id, prompt=prompt, sampling=sampling, **kw)  # type: ignore[arg-type]
    recorder.backend.submit(msg, [])


def slices(recorder: Recorder) -> list[Slice]:
    return list(recorder.backend.scheduler.fair.slices)


def batch_alone(model: Path) -> list[int]:
    recorder = Recorder(model, solo=False, prefill_step_size=MOST, stream_interval=0)
    try:
        generate(recorder, "batch", LONG, 6, priority=BATCH)
        recorder.run()
        return recorder.tokens["batch"]
    finally:
        recorder.close()


@pytest.mark.slow
def test_batch_slices_are_bounded_and_spaced_while_a_person_reads(tiny_lm_path: Path) -> None:
    expected = batch_alone(tiny_lm_path)
    recorder = Recorder(tiny_lm_path, solo=False, prefill_step_size=MOST, stream_interval=0)
    try:
        generate(recorder, "batch", LONG, 6, priority=BATCH)
        while sum(s.tokens for s in slices(recorder)) < 600:  # efficient slices by now
            recorder.step()
        before = len(slices(recorder))
        efficient = max(s.tokens for s in slices(recorder))
        assert efficient > 2 * BOUNDED_MOST, "the slices must have grown to their size"

        generate(recorder, "chat", [5, 6, 7, 8, 9, 10, 11, 12], 120)
        replies_from = len(recorder.replies)
        while not any(isinstance(r, Done) and r.request_id == "chat" for r in recorder.replies):
            recorder.step()
        beside = slices(recorder)[before:]
        chat_at = len(slices(recorder))
        recorder.run()
        after = slices(recorder)[chat_at:]

        bounded = [s for s in beside if s.bounded]
        read = [s for s in bounded if s.tokens > 0]
        assert len(read) >= 2, f"the batch prompt must go on beside the answer: {beside}"
        assert all(s.tokens <= BOUNDED_MOST and s.seconds <= BOUND_SECONDS for s in read), (
            f"a batch slice beside the person's answer is over one pass and a half: {read}"
        )
        # each slice rests twice its time (a third of the time) before the next one
        for first, second in itertools.pairwise(read):
            assert second.at >= first.at + first.seconds + rest_after(first.seconds, SHARE)
        assert any(s.tokens == 0 for s in bounded), "no step decoded without a slice"

        # the person's tokens come between the batch slices, not after them all
        order = []
        for reply in recorder.replies[replies_from:]:
            if isinstance(reply, Prefilled) and reply.request_id == "batch":
                order.append("slice")
            elif isinstance(reply, Batch) and any(c.request_id == "chat" for c in reply.chunks):
                order.append("token")
        first_token = order.index("token")
        between = order[first_token:]
        last_token = len(between) - between[::-1].index("token")
        assert "slice" in between[:last_token], f"no batch slice while the person read: {order}"

        assert after and not any(s.bounded for s in after)  # efficient once the answer ended
        assert max(s.tokens for s in after) > BOUNDED_MOST
        done = recorder.done("batch")
        assert done.finish_reason == "length"
        assert recorder.tokens["batch"] == expected  # the skipped slices lost nothing
    finally:
        recorder.close()


@pytest.mark.slow
def test_slices_stay_bounded_in_the_linger_after_an_answer(tiny_lm_path: Path) -> None:
    recorder = Recorder(
        tiny_lm_path,
        solo=False,
        prefill_step_size=MOST,
        stream_interval=0,
        batch_slice_linger=600.0,  # longer than the test: every later slice is in it
    )
    try:
        assert recorder.backend.scheduler.fair.linger == 600.0
        generate(recorder, "batch", LONG, 6, priority=BATCH)
        while sum(s.tokens for s in slices(recorder)) < 600:
            recorder.step()
        assert not any(s.bounded for s in slices(recorder)), "nobody came yet: efficient"
        generate(recorder, "chat", [5, 6, 7, 8, 9, 10, 11, 12], 24)
        while not any(isinstance(r, Done) and r.request_id == "chat" for r in recorder.replies):
            recorder.step()
        chat_at = len(slices(recorder))
        recorder.run()
        after = [s for s in slices(recorder)[chat_at:] if s.tokens > 0]
        assert after, "the batch prompt must still have been reading after the answer"
        assert all(s.bounded and s.tokens <= BOUNDED_MOST for s in after), after
        # nobody's answer to keep apart: no step of the linger skips its slice
        assert all(s.tokens > 0 for s in slices(recorder)[chat_at:] if s.bounded), after
        assert recorder.done("batch").finish_reason == "length"
    finally:
        recorder.close()
