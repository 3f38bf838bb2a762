"""Prompt reuse on every architecture: an agent's turns start from checkpoints.

On each family of :mod:`tests.fixtures.tiny_arch` (plain attention, sliding windows,
Gated DeltaNet, short convolutions, Mamba2 hybrids) a conversation with a long system
prompt is replayed through the worker's own scheduling (an in-process backend) with
the four turns an agent makes: the next turn, the next turn with the last reply
changed, a new first question under the same system prompt, and a sibling follow-up
after the second turn was stored. For each, the tokens taken from the cache
(``usage.cached_tokens``) are compared with the *reusable prefix*: the longest
prefix the new prompt shares with a prompt or prompt + reply that the worker has
already computed. A plain-attention model reuses all of it; the others reuse at
least the last checkpoint before it (the end of the system prompt, of an earlier
prompt or reply, or an interval of a long prefill), so never less than
mlx_lm.server, which keeps the cache at those same ends. And the answer from a
reused cache is the answer of a full prefill.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mlx_gateway.protocol.messages import Error, Generate, SamplingParams
from mlx_gateway.workers.lm import checkpoints as cp
from mlx_gateway.workers.lm.prompt_cache import common_prefix, token_bytes

from ...fixtures.tiny_arch import FAMILIES
from ..lm_recorder import Recorder

pytestmark = pytest.mark.slow

ArchModel = Callable[[str], Path]

SYSTEM = " ".join(f"Rule {i}: answer briefly and cite the tool output." for i in range(22))
ANSWER_TOKENS = 12
Messages = list[dict[str, str]]


def _recorder(model: Path, **options: object) -> Recorder:
    return Recorder(model, solo_check=False, max_concurrency=4, **options)


def _prompt(rec: Recorder, messages: Messages) -> list[int]:
    request = Generate(request_id="count", messages=messages)
    return rec.backend._prompt_tokens(request)[0]


def _chat(
    rec: Recorder, request_id: str, messages: Messages, max_tokens: int = ANSWER_TOKENS
) -> tuple[str, int, int]:
    """Send one chat and run the backend until idle: its text, prompt and cached tokens."""
    rec.backend.submit(
        Generate(
            request_id=request_id,
            messages=messages,
            sampling=SamplingParams(max_tokens=max_tokens, temperature=0.0),
        ),
        [],
    )
    rec.run()
    assert not [r for r in rec.replies if isinstance(r, Error)]
    usage = rec.done(request_id).usage
    return rec.text(request_id), usage.prompt_tokens, usage.cached_tokens


class Session:
    """A conversation replayed through one backend, remembering every token
    sequence the backend computed (each prompt, and each prompt + its reply)."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.computed: list[list[int]] = []

    def turn(self, request_id: str, messages: Messages) -> tuple[str, int, int]:
        """Its answer, the cached tokens and the reusable prefix it had."""
        prompt = _prompt(self.rec, messages)
        reusable = max(
            (
                min(common_prefix(token_bytes(prompt), token_bytes(s)), len(prompt) - 1)
                for s in self.computed
            ),
            default=0,
        )
        text, prompt_tokens, cached = _chat(self.rec, request_id, messages)
        assert prompt_tokens == len(prompt)
        self.computed += [prompt, prompt + self.rec.tokens[request_id]]
        return text, cached, reusable


def _turns(answer: str) -> dict[str, Messages]:
    system = {"role": "system", "content": SYSTEM}
    first = {"role": "user", "content": "What does rule 3 say about tools?"}
    reply = {"role": "assistant", "content": answer}
    follow = {"role": "user", "content": "And rule 7, in one line?"}
    return {
        "turn 2": [system, first, reply, follow],
        "new question": [system, {"role": "user", "content": "Rule 12, please, in full."}],
        "edited reply": [system, first, {"role": "assistant", "content": "Rule 3: cite."}, follow],
        "sibling": [system, first, reply, {"role": "user", "content": "And rule 9 instead?"}],
    }


@pytest.mark.parametrize("family", FAMILIES)
def test_every_turn_of_an_agent_reuses_its_prefix(arch_model: ArchModel, family: str) -> None:
    model = arch_model(family)
    rec = _recorder(model)
    fresh = _recorder(model, prompt_cache_bytes=0)
    try:
        backend = rec.backend
        session = Session(rec)
        system = {"role": "system", "content": SYSTEM}
        first = [system, {"role": "user", "content": "What does rule 3 say about tools?"}]
        answer, cached, _ = session.turn("turn 1", first)
        assert cached == 0
        prompt_1 = _prompt(rec, first)
        system_end = backend.system_ends.find(
            backend.tokenizer, first, {}, backend.tool_prompt, prompt_1
        )
        assert 500 < system_end < len(prompt_1) - 5  # found from the template
        interval = backend.scheduler.checkpoint_every
        assert (interval == 0) == backend.scheduler.cuts
        for name, messages in _turns(answer).items():
            text, cached, reusable = session.turn(name, messages)
            prompt = _prompt(rec, messages)
            assert cached <= reusable
            if backend.scheduler.cuts:
                assert cached == reusable, name
            else:
                # At least the last boundary mlx_lm.server keeps too, and within
                # one interval of all that could be reused.
                assert cached >= reusable - interval, (name, cached, reusable)
            if name in ("turn 2", "sibling", "edited reply"):
                assert cached >= len(prompt_1) - 1, (name, cached)
            if name == "new question":
                assert cached >= system_end, (name, cached)
            if name in ("turn 2", "sibling"):
                assert text == _chat(fresh, name, messages)[0], name
            assert len(prompt) > cached
    finally:
        rec.close()
        fresh.close()


@pytest.mark.parametrize("family", ["llama", "qwen3_next", "gemma3_text", "nemotron_h"])
def test_requests_with_one_system_prompt_prefill_it_once(
    arch_model: ArchModel, family: str
) -> None:
    """Three requests arriving together with the same system prompt: one prefills
    it, the others wait for it and start from it."""
    rec = _recorder(arch_model(family), prefill_step_size=128)
    try:
        system = {"role": "system", "content": SYSTEM}
        questions = ["What is rule 2?", "Quote rule 19 exactly.", "Is rule 5 about tools?"]
        requests = {
            f"q{i}": [system, {"role": "user", "content": q}] for i, q in enumerate(questions)
        }
        for request_id, messages in requests.items():
            rec.backend.submit(
                Generate(
                    request_id=request_id,
                    messages=messages,
                    sampling=SamplingParams(max_tokens=6, temperature=0.0),
                ),
                [],
            )
        rec.run()
        assert not [r for r in rec.replies if isinstance(r, Error)]
        prompts = {rid: _prompt(rec, m) for rid, m in requests.items()}
        first = next(iter(prompts.values()))
        shared = min(
            common_prefix(token_bytes(first), token_bytes(p)) for p in list(prompts.values())[1:]
        )
        own = sum(len(p) - shared for p in prompts.values())
        prefilled = sum(
            rec.done(rid).usage.prompt_tokens - rec.done(rid).usage.cached_tokens for rid in prompts
        )
        assert shared > 500
        assert prefilled <= shared + own, (prefilled, shared, own)
        alone = _recorder(arch_model(family), prompt_cache_bytes=0)
        try:
            for rid, messages in requests.items():
                assert rec.text(rid) == _chat(alone, rid, messages, 6)[0], rid
        finally:
            alone.close()
    finally:
        rec.close()


def test_checkpoints_of_a_hybrid_stay_within_the_byte_cap(arch_model: ArchModel) -> None:
    """Many conversations of a hybrid model, each leaving an entry with checkpoints:
    the cache never holds more than ``prompt_cache_bytes``, counting every array
    it keeps once."""
    cap = 600_000
    rec = _recorder(arch_model("qwen3_next"), prompt_cache_bytes=cap)
    try:
        cache = rec.backend.prompt_cache
        system = {"role": "system", "content": SYSTEM}
        for i in range(8):
            messages = [
                {**system, "content": f"Conversation {i}. " + SYSTEM},
                {"role": "user", "content": f"Question {i}: what does rule {i} say?"},
            ]
            _chat(rec, f"c{i}", messages)
            assert cache.nbytes <= cap
            assert _held_bytes(cache) <= cache.nbytes
            kept = [e for e in cache._entries.values() if e.checkpoints]
            assert kept, "the entries keep their checkpoints"
        assert len(cache) >= 1
    finally:
        rec.close()


def _held_bytes(cache: Any) -> int:
    """The bytes of every distinct array the prompt cache holds (shared arrays once)."""
    seen: dict[int, int] = {}

    def add(state: Any) -> None:
        if isinstance(state, list | tuple):
            for part in state:
                add(part)
        elif hasattr(state, "nbytes") and not isinstance(state, str):
            seen[id(state)] = int(state.nbytes)

    for entry in cache._entries.values():
        add([layer.state for layer in entry.cache])
        for checkpoint in entry.checkpoints.values():
            add([layer.state for layer in checkpoint.layers if layer is not None])
    return sum(seen.values())


def test_the_interval_fits_the_budget() -> None:
    assert cp.interval(0, 32768, 2**30) == 0
    assert cp.interval(1000, 32768, 2**30) == cp.MIN_INTERVAL
    every = cp.interval(50 * 2**20, 32768, 8 * 2**30)
    assert every % cp.MIN_INTERVAL == 0
    assert 32768 / every * 50 * 2**20 <= cp.CHECKPOINT_SHARE * 8 * 2**30
    assert cp.interval(2**30, 32768, 2**20) == cp.MAX_INTERVAL


def test_the_plan_marks_system_intervals_and_prompt_end() -> None:
    assert cp.plan(0, 1000, 300, 256, cut=False) == {
        256: cp.INTERVAL,
        300: cp.SYSTEM,
        512: cp.INTERVAL,
        768: cp.INTERVAL,
        999: cp.PROMPT,
    }
    assert cp.plan(600, 1000, 300, 256, cut=False) == {768: cp.INTERVAL, 999: cp.PROMPT}
    assert cp.plan(0, 1000, 300, 0, cut=True) == {300: cp.SYSTEM}
    assert cp.plan(0, 1000, cp.MIN_SYSTEM - 1, 0, cut=True) == {}  # a template's opening
    parts = cp.segments(list(range(10)), 2, [5, 1, 8, 12])
    assert parts == [[2, 3, 4], [5, 6, 7], [8, 9]]


def test_a_new_worker_of_a_hybrid_resumes_from_checkpoints_on_disk(
    arch_model: ArchModel, tmp_path: Path
) -> None:
    """A hybrid's system and prompt checkpoints are written to the disk tier with
    their entry: a worker started later answers a new first question from the
    system checkpoint and the next turn from the prompt's."""
    model = arch_model("nemotron_h")
    options = {"prompt_cache_dir": str(tmp_path / "kv"), "prompt_cache_disk_bytes": 10**9}
    system = {"role": "system", "content": SYSTEM}
    first = [system, {"role": "user", "content": "What does rule 3 say about tools?"}]
    rec = _recorder(model, **options)
    try:
        _chat(rec, "t1", first)
        prompt_1 = _prompt(rec, first)
        backend = rec.backend
        system_end = backend.system_ends.find(
            backend.tokenizer, first, {}, backend.tool_prompt, prompt_1
        )
    finally:
        rec.close()  # writes the entry and its checkpoints
    later = _recorder(model, **options)
    try:
        question = [system, {"role": "user", "content": "Rule 12, please, in full."}]
        assert _chat(later, "new", question)[2] == system_end
        edited = [
            *first,
            {"role": "assistant", "content": "Rule 3: cite."},
            {"role": "user", "content": "And rule 7?"},
        ]
        assert _chat(later, "edited", edited)[2] >= len(prompt_1) - 1
    finally:
        later.close()
