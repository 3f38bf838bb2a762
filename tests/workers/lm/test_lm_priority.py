"""Priority in the lm worker, read on its schedule: the order of the ``Prefilled``
slices and the chunks it emits (never timings).

The real scheduler runs the tiny llama in process (:mod:`..lm_recorder`), its chunks
sent at each step (``stream_interval`` 0: the order of the replies is that of the
steps). A batch
request reads a long prompt in slices of at most 32 tokens; an interactive request
that arrives meanwhile must get its first token before the batch request reads any
further slice, and the batch request must then go on from where it stopped (its
``Prefilled`` count never goes back) and generate exactly what it generates alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlx_gateway.protocol.messages import (
    BATCH,
    Batch,
    Done,
    Generate,
    Prefilled,
    Priority,
    Reply,
    SamplingParams,
)

from ..lm_recorder import Recorder

SLICE = 32
LONG = [10 + (i * 7) % 200 for i in range(600)]  # ≈ 19 slices or more


def generate(recorder: Recorder, request_id: str, prompt: list[int], priority: Priority) -> None:
    sampling = SamplingParams(max_tokens=6, temperature=0.0)
    msg = Generate(request_id=request_id, prompt=prompt, sampling=sampling, priority=priority)
    recorder.backend.submit(msg, [])


def schedule(replies: list[Reply]) -> list[tuple[str, str, int]]:
    """What each step did, in order: ``("prefilled", id, done)`` and ``("chunk", id, 0)``."""
    seen: list[tuple[str, str, int]] = []
    for reply in replies:
        if isinstance(reply, Prefilled):
            seen.append(("prefilled", reply.request_id, reply.done))
        elif isinstance(reply, Batch):
            seen += [("chunk", c.request_id, 0) for c in reply.chunks]
    return seen


def alone(model: Path) -> list[int]:
    recorder = Recorder(model, prefill_step_size=SLICE, stream_interval=0)
    try:
        generate(recorder, "batch", LONG, BATCH)
        recorder.run()
        return recorder.tokens["batch"]
    finally:
        recorder.close()


@pytest.mark.parametrize("solo", [True, False], ids=["alone", "in-batch"])
def test_a_batch_prefill_yields_to_an_interactive_request_at_its_next_slice(
    tiny_lm_path: Path, solo: bool
) -> None:
    expected = alone(tiny_lm_path)
    recorder = Recorder(tiny_lm_path, solo=solo, prefill_step_size=SLICE, stream_interval=0)
    try:
        generate(recorder, "batch", LONG, BATCH)
        for _ in range(200):
            recorder.step()
            if sum(s[0] == "prefilled" for s in schedule(recorder.replies)) >= 3:
                break
        before = schedule(recorder.replies)
        read = max(done for kind, rid, done in before if kind == "prefilled" and rid == "batch")
        assert read < len(LONG) / 2, "the batch prompt must still be prefilling"

        generate(recorder, "chat", [5, 6, 7, 8, 9, 10, 11, 12], "interactive")
        recorder.run()
        after = schedule(recorder.replies)[len(before) :]
        first_chat = after.index(("chunk", "chat", 0))
        batch_slices = [s for s in after[:first_chat] if s[1] == "batch"]
        assert batch_slices == [], (
            f"the batch prefill went on before the chat's first token: {after}"
        )
        resumed = [done for kind, rid, done in after if kind == "prefilled" and rid == "batch"]
        assert resumed and resumed[0] > read, "the batch prefill starts over instead of going on"
        assert resumed == sorted(resumed)
        done = recorder.done("batch")
        assert isinstance(done, Done) and done.finish_reason == "length"
        assert recorder.tokens["batch"] == expected  # the cache it went on from is right
    finally:
        recorder.close()


def test_interactive_requests_are_taken_before_queued_batch_ones(tiny_lm_path: Path) -> None:
    recorder = Recorder(tiny_lm_path, solo=False, max_concurrency=1)
    try:
        generate(recorder, "batch-1", [20, 21, 22], BATCH)
        generate(recorder, "batch-2", [23, 24, 25], BATCH)
        generate(recorder, "chat-1", [26, 27, 28], "interactive")
        generate(recorder, "chat-2", [29, 30, 31], "interactive")
        recorder.run()
        ends = [r.request_id for r in recorder.replies if isinstance(r, Done)]
        assert ends == ["chat-1", "chat-2", "batch-1", "batch-2"]
        assert recorder.backend.runs_interactive() is False  # nothing left
    finally:
        recorder.close()
