"""Speculative decoding (``draft_model_path``): solo requests decode with a draft
model, and the tokens are the model's own (tiny real llamas sharing one trained
tokenizer, random weights).

The reference is the same request without a draft model. Two drafts: the model
itself (it agrees with every greedy token: all proposals are taken) and another
random llama (it almost never agrees: nearly every proposal is refused). Greedy ids
must equal the reference's either way, through stop strings, budgets cut in the
middle of a round, log-probabilities, a move into the batch in every state, and
prompt-cache entries written by a speculative request.
"""

from __future__ import annotations

from array import array
from pathlib import Path

import pytest

from mlx_gateway.protocol.messages import Batch, Generate, SamplingParams
from mlx_gateway.workers.lm.solo import SpeculativeDecode
from mlx_gateway.workers.runtime.contract import LoadError
from tests.fixtures.tiny_models import build_tiny_lm

from ..lm_recorder import PROMPTS, Recorder

pytestmark = pytest.mark.slow

ROUNDS = 3  # proposals a round


@pytest.fixture(scope="module")
def other_draft(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A smaller random llama with the same tokenizer (it disagrees with the model)."""
    return build_tiny_lm(tmp_path_factory.mktemp("draft"), hidden=32, layers=1, seed=7)


@pytest.fixture(scope="module")
def drafts(tiny_lm_path: Path, other_draft: Path) -> dict[str, Path]:
    return {"agrees": tiny_lm_path, "disagrees": other_draft}


@pytest.fixture(scope="module")
def reference(tiny_lm_path: Path) -> dict[str, list[int]]:
    """Greedy ids without a draft model (solo, no prompt cache)."""
    rec = Recorder(tiny_lm_path, prompt_cache_bytes=0)
    for key, content in PROMPTS.items():
        rec.submit(key, content, max_tokens=40)
        rec.run()
        rec.submit(f"{key}+7", content, max_tokens=7)
        rec.run()
    rec.close()
    return dict(rec.tokens)


def speculating(model: Path, draft: Path, **options: object) -> Recorder:
    return Recorder(model, draft_model_path=str(draft), num_draft_tokens=ROUNDS, **options)


@pytest.mark.parametrize("which", ["agrees", "disagrees"])
def test_greedy_ids_are_the_models_own(
    tiny_lm_path: Path, drafts: dict[str, Path], reference, which: str
) -> None:
    rec = speculating(tiny_lm_path, drafts[which], prompt_cache_bytes=0)
    for key, content in PROMPTS.items():
        rec.submit(key, content, max_tokens=40)
        rec.step()
        assert isinstance(rec.backend.scheduler._solo.solo, SpeculativeDecode)  # type: ignore[union-attr]
        rec.run()
        assert rec.tokens[key] == reference[key], (which, key)
        done = rec.done(key)
        assert done.usage.completion_tokens == 40 and done.finish_reason == "length"
        # 7 tokens: the last round is cut to the budget, nothing past it comes out.
        rec.submit(f"{key}+7", content, max_tokens=7)
        rec.run()
        assert rec.tokens[f"{key}+7"] == reference[f"{key}+7"], (which, key)
        assert rec.done(f"{key}+7").usage.completion_tokens == 7
        usage = done.usage
        assert usage.draft_proposed > 0
        if which == "agrees":  # every proposal taken: 4 tokens a pass of the model
            assert usage.draft_accepted == usage.draft_proposed >= 39 * ROUNDS // (ROUNDS + 1)
        else:
            assert usage.draft_accepted < usage.draft_proposed
    rec.close()


def test_log_probabilities_are_the_models(tiny_lm_path: Path, other_draft: Path) -> None:
    def logprobs(rec: Recorder) -> list[tuple[str, float, list[tuple[str, float]]]]:
        rec.backend.submit(
            Generate(
                request_id="lp",
                messages=[{"role": "user", "content": PROMPTS["c"]}],
                sampling=SamplingParams(max_tokens=12, temperature=0.0),
                logprobs=3,
            ),
            [],
        )
        rec.run()
        out = [
            (lp.text, lp.logprob, lp.top)
            for r in rec.replies
            if isinstance(r, Batch)
            for c in r.chunks
            for lp in c.logprobs
        ]
        rec.close()
        return out

    plain = logprobs(Recorder(tiny_lm_path, prompt_cache_bytes=0))
    assert len(plain) == 12
    for draft in (tiny_lm_path, other_draft):
        spec = logprobs(speculating(tiny_lm_path, draft, prompt_cache_bytes=0))
        assert [text for text, _, _ in spec] == [text for text, _, _ in plain]
        for (_, value, top), (_, value2, top2) in zip(plain, spec, strict=True):
            assert value == pytest.approx(value2, abs=1e-4)
            assert [t for t, _ in top] == [t for t, _ in top2]


def test_a_stop_string_ends_it_where_it_ends_without_the_draft(
    tiny_lm_path: Path, drafts: dict[str, Path]
) -> None:
    plain = Recorder(tiny_lm_path, prompt_cache_bytes=0)
    plain.submit("full", PROMPTS["b"], max_tokens=40)
    plain.run()
    stop = plain.text("full")[17:20]  # ends in the middle of some round
    plain.submit("stopped", PROMPTS["b"], max_tokens=40, stop=[stop])
    plain.run()
    plain.close()
    expected = plain.done("stopped")
    assert expected.finish_reason == "stop" and expected.usage.completion_tokens < 40
    for draft in drafts.values():
        rec = speculating(tiny_lm_path, draft, prompt_cache_bytes=0)
        rec.submit("stopped", PROMPTS["b"], max_tokens=40, stop=[stop])
        rec.run()
        assert rec.text("stopped") == plain.text("stopped")
        assert rec.done("stopped").finish_reason == "stop"
        assert rec.done("stopped").usage.completion_tokens == expected.usage.completion_tokens
        rec.close()


@pytest.mark.parametrize("steps", [1, 2, 5, 6, 7, 12])
def test_the_request_moves_into_the_batch_in_any_state(
    tiny_lm_path: Path, drafts: dict[str, Path], reference, steps: int
) -> None:
    # prefill_step_size 8: the first steps prefill "d", then each round gives 1 to
    # 4 tokens, one a step: the move must work mid-prompt, mid-round and between.
    for draft in drafts.values():
        rec = speculating(tiny_lm_path, draft, prefill_step_size=8, prompt_cache_bytes=0)
        rec.submit("d", PROMPTS["d"], max_tokens=40)
        rec.step(steps)
        assert rec.backend.scheduler._solo is not None
        rec.submit("b", PROMPTS["b"], max_tokens=40)
        rec.step()
        assert (
            rec.backend.scheduler._solo is None and len(rec.backend.scheduler._by_uid) == 2
        )  # both batched
        rec.run()
        for key in ("d", "b"):
            assert rec.tokens[key] == reference[key], (key, steps, draft)
            assert rec.done(key).usage.completion_tokens == 40
        rec.close()


def test_the_prompt_cache_entry_holds_what_was_returned(
    tiny_lm_path: Path, drafts: dict[str, Path], reference
) -> None:
    for draft in drafts.values():
        rec = speculating(tiny_lm_path, draft)
        rec.submit("first", PROMPTS["d"], max_tokens=7)  # ends mid-round
        rec.run()
        (entry,) = rec.backend.prompt_cache._entries.values()
        tokens = list(array("I", entry.key))
        assert len(tokens) == entry.cache[0].offset
        # The prompt and the tokens returned, but the last (read by no pass yet).
        assert tokens[-6:] == reference["d+7"][:-1]
        assert len(tokens) == rec.done("first").usage.prompt_tokens + 6
        # A hit on that entry (the draft catches up on the cached part) decodes the same.
        rec.submit("again", PROMPTS["d"], max_tokens=40)
        rec.run()
        again = rec.done("again").usage
        assert again.cached_tokens == again.prompt_tokens - 1
        assert rec.tokens["again"] == reference["d"]
        rec.close()


def test_requests_with_logits_processors_decode_without_the_draft(tiny_lm_path: Path) -> None:
    rec = speculating(tiny_lm_path, tiny_lm_path, prompt_cache_bytes=0)
    rec.submit("p", PROMPTS["a"], max_tokens=10, repetition_penalty=1.3)
    rec.step()
    solo = rec.backend.scheduler._solo
    assert solo is not None and not isinstance(solo.solo, SpeculativeDecode)
    rec.run()
    assert rec.done("p").usage.draft_proposed == 0
    rec.close()


def test_a_draft_with_another_vocabulary_is_refused_at_load(
    tiny_lm_path: Path, tmp_path: Path
) -> None:
    other = build_tiny_lm(tmp_path / "thinking", thinking=True)  # two more tokens
    with pytest.raises(LoadError, match="another vocabulary than the model"):
        speculating(tiny_lm_path, other)


def test_a_draft_of_the_contributing_layers_agrees_with_a_deeper_model(
    tmp_path: Path,
) -> None:
    """The bench's pair (bench/speculative.py): a model with inert layers and a draft
    of its other layers; the draft's proposals are all taken, ids unchanged."""
    deep = build_tiny_lm(tmp_path / "deep", hidden=64, layers=2, inert_layers=4, seed=3)
    shallow = build_tiny_lm(tmp_path / "shallow", hidden=64, layers=2, seed=3)
    plain = Recorder(deep, prompt_cache_bytes=0)
    plain.submit("x", PROMPTS["b"], max_tokens=24)
    plain.run()
    plain.close()
    rec = speculating(deep, shallow, prompt_cache_bytes=0)
    rec.submit("x", PROMPTS["b"], max_tokens=24)
    rec.run()
    rec.close()
    assert rec.tokens["x"] == plain.tokens["x"]
    usage = rec.done("x").usage
    assert usage.draft_proposed > 0 and usage.draft_accepted == usage.draft_proposed
