"""Continuous batching and the prompt cache of the lm backend, in-process, on the
tiny real llama (random weights, real mlx-lm BatchGenerator).

The generated token ids are observed by wrapping ``Scheduler._advance`` and
``Scheduler._take_plain`` (the methods that take each token the generator
produced); the generation itself is untouched. Greedy decoding of the same prompt
gives the same ids whether the prompt runs alone or in a left-padded batch with
others, joined mid-flight or next to a cancelled neighbour: the tiny model's logits
differ by float rounding at most, and its scaled output layer keeps the best token
well ahead.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mlx_gateway.protocol.messages import Batch, Generate, SamplingParams

from ..lm_recorder import PROMPTS, Recorder

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(tiny_lm_path: Path) -> dict[str, list[int]]:
    """Each prompt generated alone in a batch of one (no solo decoding, no prompt
    cache): the reference."""
    rec = Recorder(tiny_lm_path, solo=False, max_concurrency=1, prompt_cache_bytes=0)
    for key, content in PROMPTS.items():
        rec.submit(key, content, max_tokens=40)
        rec.run()
        assert rec.done(key).usage.completion_tokens == 40
    rec.close()
    return dict(rec.tokens)


def test_batched_greedy_ids_equal_unbatched(tiny_lm_path: Path, reference) -> None:
    rec = Recorder(tiny_lm_path, max_concurrency=4, prompt_cache_bytes=0)
    for key, content in PROMPTS.items():  # different lengths: the batch is left-padded
        rec.submit(key, content, max_tokens=40)
    rec.run()
    assert max(len(r.chunks) for r in rec.replies if isinstance(r, Batch)) == 4
    for key in PROMPTS:
        assert rec.tokens[key] == reference[key], key
        assert rec.done(key).finish_reason == "length"
    rec.close()


def test_request_inserted_mid_batch_finishes_correctly(tiny_lm_path: Path, reference) -> None:
    rec = Recorder(tiny_lm_path, max_concurrency=4, prompt_cache_bytes=0)
    rec.submit("a", PROMPTS["a"], max_tokens=40)
    rec.submit("b", PROMPTS["b"], max_tokens=40)
    rec.step(10)
    assert len(rec.tokens["a"]) >= 5  # a is well into its generation
    rec.submit("d", PROMPTS["d"], max_tokens=40)
    rec.step(3)
    rec.submit("c", PROMPTS["c"], max_tokens=40)
    rec.run()
    for key in PROMPTS:
        assert rec.tokens[key] == reference[key], key
        assert rec.done(key).usage.completion_tokens == 40
    rec.close()


def test_cancelling_one_stream_leaves_the_others_alone(tiny_lm_path: Path, reference) -> None:
    rec = Recorder(tiny_lm_path, max_concurrency=4, prompt_cache_bytes=0)
    for key, content in PROMPTS.items():
        rec.submit(key, content, max_tokens=40)
    rec.step(8)
    rec.backend.cancel("b")
    assert rec.done("b").finish_reason == "cancelled"
    assert rec.backend.counts() == (3, 0)
    rec.run()
    for key in ("a", "c", "d"):
        assert rec.tokens[key] == reference[key], key
        assert rec.done(key).finish_reason == "length"
    assert reference["b"][: len(rec.tokens["b"])] == rec.tokens["b"]  # right until it left
    rec.close()


def test_prompt_cache_hit_gives_the_same_text(tiny_lm_path: Path, reference) -> None:
    rec = Recorder(tiny_lm_path, max_concurrency=4)
    rec.submit("first", PROMPTS["d"], max_tokens=40)
    rec.run()
    assert rec.done("first").usage.cached_tokens == 0
    rec.submit("again", PROMPTS["d"], max_tokens=40)
    rec.run()
    hit = rec.done("again").usage
    assert hit.cached_tokens == hit.prompt_tokens - 1  # all but the last prompt token
    assert rec.tokens["first"] == rec.tokens["again"] == reference["d"]
    assert rec.text("first") == rec.text("again")
    assert rec.backend.prompt_cache.hits >= 1
    rec.close()


def test_next_turn_reuses_the_conversation(tiny_lm_path: Path) -> None:
    plain = Recorder(tiny_lm_path, max_concurrency=2, prompt_cache_bytes=0)
    cached = Recorder(tiny_lm_path, max_concurrency=2)
    turn1 = [{"role": "user", "content": PROMPTS["d"]}]
    for rec in (plain, cached):
        rec.backend.submit(
            Generate(
                request_id="t1",
                messages=turn1,
                sampling=SamplingParams(max_tokens=16, temperature=0.0),
            ),
            [],
        )
        rec.run()
    reply = cached.text("t1")
    assert reply == plain.text("t1")
    turn2 = [*turn1, {"role": "assistant", "content": reply}, {"role": "user", "content": "more"}]
    for rec in (plain, cached):
        rec.backend.submit(
            Generate(
                request_id="t2",
                messages=turn2,
                sampling=SamplingParams(max_tokens=16, temperature=0.0),
            ),
            [],
        )
        rec.run()
    first, second = cached.done("t1").usage, cached.done("t2").usage
    # At least the whole first prompt came from the cache (more when the reply
    # re-tokenizes to the ids that were generated).
    assert second.cached_tokens >= first.prompt_tokens
    assert plain.done("t2").usage.cached_tokens == 0
    assert cached.tokens["t2"] == plain.tokens["t2"]
    plain.close()
    cached.close()


def test_batched_requests_with_cache_hits_match(tiny_lm_path: Path, reference) -> None:
    # Hits of different lengths join one prefill batch next to a cold prompt.
    rec = Recorder(tiny_lm_path, max_concurrency=4)
    rec.submit("warm-b", PROMPTS["b"], max_tokens=40)
    rec.submit("warm-d", PROMPTS["d"], max_tokens=40)
    rec.run()
    for key in ("b", "d", "c"):
        rec.submit(key, PROMPTS[key], max_tokens=40)
    rec.run()
    assert rec.done("b").usage.cached_tokens > 0
    assert rec.done("d").usage.cached_tokens > 0
    for key in ("b", "d", "c"):
        assert rec.tokens[key] == reference[key], key
    rec.close()


def test_the_byte_cap_is_honoured(tiny_lm_path: Path) -> None:
    rec = Recorder(tiny_lm_path, max_concurrency=4)
    rec.submit("probe", PROMPTS["d"], max_tokens=8)
    rec.run()
    one = rec.backend.prompt_cache.nbytes
    assert one > 0
    cap = int(2.5 * one)
    capped = Recorder(tiny_lm_path, max_concurrency=4, prompt_cache_bytes=cap)
    for i in range(6):
        capped.submit(f"r{i}", f"{i} {PROMPTS['d']}", max_tokens=8)
        capped.run()
        assert capped.backend.prompt_cache.nbytes <= cap
    assert len(capped.backend.prompt_cache) == 2  # the newest two; older ones evicted
    capped.submit("newest-again", f"5 {PROMPTS['d']}", max_tokens=8)
    capped.submit("oldest-again", f"0 {PROMPTS['d']}", max_tokens=8)
    capped.run()
    assert capped.done("newest-again").usage.cached_tokens > 20
    assert capped.done("oldest-again").usage.cached_tokens < 10  # the template's opening only
    rec.close()
    capped.close()


def test_the_entry_cap_is_honoured(tiny_lm_path: Path) -> None:
    rec = Recorder(tiny_lm_path, max_concurrency=4, prompt_cache_entries=3)
    for i in range(5):
        rec.submit(f"r{i}", f"{i} {PROMPTS['b']}", max_tokens=4)
        rec.run()
    assert len(rec.backend.prompt_cache) == 3
    rec.close()


def test_plain_requests_stream_what_the_general_path_streams(tiny_lm_path: Path) -> None:
    """The short path of a plain request's tokens (no stop strings, log-probs or tool
    parsing) sends the same text and token counts as the general one, which a stop
    string that never occurs forces."""
    streamed = {}
    for stop in ([], ["<a stop string the model never writes>"]):
        rec = Recorder(tiny_lm_path, solo=False, max_concurrency=4, prompt_cache_bytes=0)
        for key, content in PROMPTS.items():
            rec.submit(key, content, max_tokens=40, stop=stop)
        assert all(a.plain == (not stop) for a in rec.backend.scheduler._by_id.values())
        rec.run()
        streamed[bool(stop)] = {
            key: (
                rec.text(key),
                sum(
                    c.tokens
                    for r in rec.replies
                    if isinstance(r, Batch)
                    for c in r.chunks
                    if c.request_id == key
                ),
                rec.done(key).usage.completion_tokens,
            )
            for key in PROMPTS
        }
        rec.close()
    assert streamed[False] == streamed[True]
    assert all(text and done == 40 for text, _, done in streamed[False].values())
