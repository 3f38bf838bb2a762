"""Solo decoding: a request that runs alone decodes outside the batch, and moves
into the batch when another request arrives (tiny real llama, random weights).

The reference is the same prompt in a batch of one (solo decoding off): greedy
ids must be equal, also across the handover, with logits processors whose
context must stay aligned, and from prompt-cache hits.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlx_gateway.protocol.messages import Batch, Error

from ..lm_recorder import PROMPTS, Recorder

pytestmark = pytest.mark.slow

PENALTIES = {"repetition_penalty": 1.3, "presence_penalty": 0.8, "frequency_penalty": 0.5}


@pytest.fixture(scope="module")
def reference(tiny_lm_path: Path) -> dict[str, list[int]]:
    """Batch of one, no prompt cache: plain greedy, and greedy with penalties."""
    rec = Recorder(tiny_lm_path, solo=False, max_concurrency=1, prompt_cache_bytes=0)
    for key, content in PROMPTS.items():
        rec.submit(key, content, max_tokens=40)
        rec.run()
        rec.submit(f"{key}+penalties", content, max_tokens=40, **PENALTIES)
        rec.run()
    rec.close()
    return dict(rec.tokens)


def test_a_request_alone_decodes_solo_with_the_same_ids(tiny_lm_path: Path, reference) -> None:
    rec = Recorder(tiny_lm_path, prompt_cache_bytes=0)
    for key, content in PROMPTS.items():
        rec.submit(key, content, max_tokens=40)
        rec.step()
        assert (
            rec.backend.scheduler._solo is not None and not rec.backend.scheduler._by_uid
        )  # outside the batch
        assert rec.backend.counts() == (1, 0)
        rec.run()
        assert rec.tokens[key] == reference[key], key
        assert rec.done(key).usage.completion_tokens == 40
        assert rec.done(key).finish_reason == "length"
        assert len(rec.text(key)) > 0
    rec.close()


def test_logits_processors_see_the_same_context_solo(tiny_lm_path: Path, reference) -> None:
    rec = Recorder(tiny_lm_path, prompt_cache_bytes=0)
    for key, content in PROMPTS.items():
        rec.submit(key, content, max_tokens=40, **PENALTIES)
        rec.run()
        assert rec.tokens[key] == reference[f"{key}+penalties"], key
    rec.close()


@pytest.mark.parametrize("steps", [1, 2, 12])
def test_the_solo_request_moves_into_the_batch_when_another_arrives(
    tiny_lm_path: Path, reference, steps: int
) -> None:
    # prefill_step_size 8: after 1 step "d" is still prefilling, after 2 it
    # may be, after 12 it is decoding; the handover must work in every state.
    rec = Recorder(tiny_lm_path, prefill_step_size=8, prompt_cache_bytes=0)
    rec.submit("d", PROMPTS["d"], max_tokens=40, **PENALTIES)
    rec.step(steps)
    assert rec.backend.scheduler._solo is not None
    rec.submit("b", PROMPTS["b"], max_tokens=40, **PENALTIES)
    rec.step()
    assert (
        rec.backend.scheduler._solo is None and len(rec.backend.scheduler._by_uid) == 2
    )  # both batched
    rec.submit("a", PROMPTS["a"], max_tokens=40, **PENALTIES)
    rec.run()
    for key in ("d", "b", "a"):
        assert rec.tokens[key] == reference[f"{key}+penalties"], (key, steps)
        assert rec.done(key).usage.completion_tokens == 40
    rec.close()


def test_with_room_for_one_the_solo_request_stays_solo(tiny_lm_path: Path, reference) -> None:
    rec = Recorder(tiny_lm_path, max_concurrency=1, prompt_cache_bytes=0)
    rec.submit("d", PROMPTS["d"], max_tokens=40)
    rec.step(4)
    rec.submit("b", PROMPTS["b"], max_tokens=40)
    rec.step()
    assert rec.backend.scheduler._solo is not None and rec.backend.scheduler._solo.request_id == "d"
    assert rec.backend.counts() == (1, 1)  # b waits its turn
    rec.run()
    assert rec.tokens["d"] == reference["d"] and rec.tokens["b"] == reference["b"]
    rec.close()


def test_prefill_in_slices_gives_the_same_ids(tiny_lm_path: Path, reference) -> None:
    rec = Recorder(tiny_lm_path, prefill_step_size=8, prompt_cache_bytes=0)
    rec.submit("d", PROMPTS["d"], max_tokens=40)
    rec.step(3)
    assert "d" not in rec.tokens  # still prefilling, one slice per step
    rec.run()
    assert rec.tokens["d"] == reference["d"]
    rec.close()


def test_a_solo_hit_leaves_the_cached_entry_intact(tiny_lm_path: Path, reference) -> None:
    rec = Recorder(tiny_lm_path)
    rec.submit("first", PROMPTS["d"], max_tokens=40)
    rec.run()
    # Shares the chat template's opening and most of "d" with the entry, then
    # differs: decoding it from a view of the entry writes past the shared part.
    rec.submit("other", PROMPTS["d"][:-20] + " and something else entirely", max_tokens=40)
    rec.run()
    assert 0 < rec.done("other").usage.cached_tokens < rec.done("first").usage.prompt_tokens
    rec.submit("again", PROMPTS["d"], max_tokens=40)
    rec.run()
    again = rec.done("again").usage
    assert again.cached_tokens == again.prompt_tokens - 1
    assert rec.tokens["first"] == rec.tokens["again"] == reference["d"]
    rec.close()


def test_cancelling_a_solo_request(tiny_lm_path: Path, reference) -> None:
    rec = Recorder(tiny_lm_path)
    rec.submit("d", PROMPTS["d"], max_tokens=40)
    rec.step(6)
    rec.backend.cancel("d")
    assert rec.done("d").finish_reason == "cancelled"
    assert rec.backend.counts() == (0, 0) and not rec.backend.has_work()
    assert reference["d"][: len(rec.tokens["d"])] == rec.tokens["d"]
    # What it had computed is kept for the next request with that prefix.
    rec.submit("again", PROMPTS["d"], max_tokens=40)
    rec.run()
    assert rec.done("again").usage.cached_tokens > 0
    assert rec.tokens["again"] == reference["d"]
    rec.close()


def test_a_stop_string_ends_a_solo_request(tiny_lm_path: Path, reference) -> None:
    rec = Recorder(tiny_lm_path, prompt_cache_bytes=0)
    rec.submit("probe", PROMPTS["c"], max_tokens=40)
    rec.run()
    full = rec.text("probe")
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    assert stop.strip(), full
    rec.submit("stopped", PROMPTS["c"], max_tokens=40, stop=[stop])
    rec.run()
    assert rec.done("stopped").finish_reason == "stop"
    assert rec.text("stopped") == full[: full.index(stop)]
    assert not rec.backend.has_work() and rec.backend.scheduler._solo is None
    rec.close()


def test_every_token_is_sent_before_done(tiny_lm_path: Path) -> None:
    # A long stream_interval holds everything after the first chunk until the end.
    rec = Recorder(tiny_lm_path, prompt_cache_bytes=0, stream_interval=60)
    rec.submit("d", PROMPTS["d"], max_tokens=40)
    rec.run()
    batches = [r for r in rec.replies if isinstance(r, Batch)]
    assert len(batches) == 2  # the first text at once, then the rest together
    assert sum(c.tokens for b in batches for c in b.chunks) == 40
    assert rec.replies.index(batches[-1]) < rec.replies.index(rec.done("d"))
    plain = Recorder(tiny_lm_path, prompt_cache_bytes=0, stream_interval=0)
    plain.submit("d", PROMPTS["d"], max_tokens=40)
    plain.run()
    assert plain.text("d") == rec.text("d")
    assert len([r for r in plain.replies if isinstance(r, Batch)]) > 20  # one per step
    rec.close()
    plain.close()


def test_a_failed_handover_fails_that_request_and_the_worker_goes_on(
    tiny_lm_path: Path, reference
) -> None:
    rec = Recorder(tiny_lm_path, prompt_cache_bytes=0)
    rec.submit("d", PROMPTS["d"], max_tokens=40)
    rec.step(6)
    generator = rec.backend.scheduler._generator
    assert generator is not None
    insert = generator.insert

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("out of memory")

    generator.insert = broken  # type: ignore[method-assign]
    rec.submit("b", PROMPTS["b"], max_tokens=40)
    with pytest.raises(RuntimeError):
        rec.step()  # the handover of "d" into the batch fails
    generator.insert = insert  # type: ignore[method-assign]
    rec.backend.fail_active("generation failed: RuntimeError: out of memory")  # as serve() does
    errors = [r for r in rec.replies if isinstance(r, Error)]
    assert [e.request_id for e in errors] == ["d"] and errors[0].status == 500
    assert rec.backend.counts() == (0, 1)  # "b" still waits, nothing is stuck
    rec.run()
    assert rec.tokens["b"] == reference["b"]
    assert not rec.backend.has_work()
    rec.close()


def test_a_failed_solo_step_fails_that_request(tiny_lm_path: Path, reference) -> None:
    rec = Recorder(tiny_lm_path, prompt_cache_bytes=0)
    rec.submit("d", PROMPTS["d"], max_tokens=40)
    rec.step(3)
    solo = rec.backend.scheduler._solo
    assert solo is not None and solo.solo is not None

    def broken() -> None:
        raise RuntimeError("boom")

    solo.solo.step = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        rec.step()
    rec.backend.fail_active("generation failed: RuntimeError: boom")
    assert [r.request_id for r in rec.replies if isinstance(r, Error)] == ["d"]
    assert not rec.backend.has_work() and rec.backend.scheduler._solo is None
    rec.submit("again", PROMPTS["d"], max_tokens=40)
    rec.run()
    assert rec.tokens["again"] == reference["d"]
    rec.close()
