"""Prompts of different lengths prefilled together give, on every architecture of
:mod:`tests.fixtures.tiny_arch`, the greedy tokens each gives alone: through mlx-lm's
``BatchGenerator`` with the worker's corrections installed as the worker installs
them, and through the worker's own scheduling. Nemotron-H needs the correction of
:mod:`mlx_gateway.workers.lm.ssm_lengths` on mlx-lm 0.32; where it cannot be made
right, the worker prefills one prompt per step."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mlx_lm import load
from mlx_lm.generate import BatchGenerator
from mlx_lm.models.nemotron_h import NemotronHMamba2Mixer
from mlx_lm.sample_utils import make_sampler

from mlx_gateway.workers.lm import ssm_lengths

from ...fixtures.tiny_arch import FAMILIES, WINDOW
from ..lm_recorder import PROMPTS, Recorder

pytestmark = pytest.mark.slow

ArchModel = Callable[[str], Path]

QUESTIONS = (
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "Models stream tokens; the gateway relays them to every client. One, two, three.",
    "One, two, three: count the steps and stop when done! " * 3,
)
TOKENS = 16


def _prompts(tokenizer: Any) -> list[list[int]]:
    return [
        tokenizer.apply_chat_template(
            [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": q}],
            add_generation_prompt=True,
        )
        for q in QUESTIONS
    ]


def _generate(model: Any, prompts: list[list[int]], prefill_step_size: int) -> list[list[int]]:
    """Greedy tokens of ``prompts``, all inserted at once (so prefilled in one step)."""
    generator = BatchGenerator(
        model,
        completion_batch_size=len(prompts),
        prefill_batch_size=len(prompts),
        prefill_step_size=prefill_step_size,
        sampler=make_sampler(temp=0.0),
    )
    uids = generator.insert(prompts, max_tokens=[TOKENS] * len(prompts))
    tokens: dict[int, list[int]] = {uid: [] for uid in uids}
    running = set(uids)
    while running:
        _, responses = generator.next()
        for response in responses:
            tokens[response.uid].append(response.token)
            if response.finish_reason is not None:
                running.discard(response.uid)
    generator.close()
    return [tokens[uid] for uid in uids]


def _alone_and_batched(model: Any, tokenizer: Any) -> tuple[list[list[int]], list[list[int]]]:
    prompts = _prompts(tokenizer)
    lengths = sorted(len(p) for p in prompts)
    assert lengths[-1] > 2 * WINDOW and len(set(lengths)) == len(lengths)
    alone = [_generate(model, [p], 2048)[0] for p in prompts]
    # 24-token slices: rows end in different slices, windows slide between slices
    batched = _generate(model, prompts, 24)
    assert len({tuple(a) for a in alone}) >= len(alone) - 1  # answers depend on the prompt
    return alone, batched


@pytest.mark.parametrize("family", FAMILIES)
def test_batch_generator_batched_equals_alone(family: str, arch_model: ArchModel) -> None:
    model, tokenizer = load(str(arch_model(family)))[:2]
    assert ssm_lengths.batches_right(model)  # as LmBackend.load installs it
    alone, batched = _alone_and_batched(model, tokenizer)
    assert batched == alone


def test_the_load_check_tells_what_the_nemotron_model_does(arch_model: ArchModel) -> None:
    """The tiny mixer :func:`ssm_lengths.install` checks at load predicts the whole
    model: with mlx-lm's own method (this mlx-lm's or a later one's), batched equals
    alone exactly when the check says the method is right; the correction is right."""
    model, tokenizer = load(str(arch_model("nemotron_h")))[:2]
    assert ssm_lengths.right_when_batched(ssm_lengths.CORRECTED_SSM)
    with ssm_lengths.library_method():
        library_right = ssm_lengths.right_when_batched(ssm_lengths.LIBRARY_SSM)
        alone, batched = _alone_and_batched(model, tokenizer)
    assert (batched == alone) == library_right


def test_install_keeps_mlx_lm_method_when_it_is_right(monkeypatch) -> None:
    monkeypatch.setattr(NemotronHMamba2Mixer, "_ssm", ssm_lengths.LIBRARY_SSM)
    library_right = ssm_lengths.right_when_batched(ssm_lengths.LIBRARY_SSM)
    assert ssm_lengths.install()
    expected = ssm_lengths.LIBRARY_SSM if library_right else ssm_lengths.ssm_with_lengths
    assert NemotronHMamba2Mixer._ssm is expected
    # A library whose method is right (the correction as the library's own) is kept.
    monkeypatch.setattr(NemotronHMamba2Mixer, "_ssm", ssm_lengths.ssm_with_lengths)
    monkeypatch.setattr(ssm_lengths, "LIBRARY_SSM", ssm_lengths.ssm_with_lengths)
    monkeypatch.setattr(ssm_lengths, "CORRECTED_SSM", lambda *a: None)
    assert ssm_lengths.install()
    assert NemotronHMamba2Mixer._ssm is ssm_lengths.ssm_with_lengths


def _recorder(model: Path, concurrency: int) -> Recorder:
    """The worker, ``concurrency`` requests at a time, prompts read in 16-token slices
    (several slices each), no prompt cache."""
    return Recorder(
        model,
        solo_check=False,
        solo=False,
        max_concurrency=concurrency,
        prefill_step_size=16,
        prompt_cache_bytes=0,
    )


def _worker_tokens(model: Path, concurrency: int) -> tuple[int, dict[str, list[int]]]:
    """Greedy tokens of :data:`PROMPTS` through the worker (submitted together, or one
    after the other's end with ``concurrency`` 1); and how many prompts its generator
    prefills in one step."""
    rec = _recorder(model, concurrency)
    prompts_a_step = rec.backend.scheduler._generator.prefill_batch_size
    for key, content in PROMPTS.items():
        rec.submit(key, content, max_tokens=TOKENS)
        if concurrency == 1:
            rec.run()
    rec.run()
    rec.close()
    return prompts_a_step, dict(rec.tokens)


@pytest.fixture(scope="module")
def alone(arch_model: ArchModel) -> Callable[[str], dict[str, list[int]]]:
    """``alone(family)``: each of :data:`PROMPTS` through the worker by itself."""
    done: dict[str, dict[str, list[int]]] = {}

    def tokens(family: str) -> dict[str, list[int]]:
        if family not in done:
            done[family] = _worker_tokens(arch_model(family), 1)[1]
        return done[family]

    return tokens


@pytest.mark.parametrize("family", FAMILIES)
def test_worker_batched_equals_alone(
    family: str, arch_model: ArchModel, alone: Callable[[str], dict[str, list[int]]]
) -> None:
    reference = alone(family)
    prompts_a_step, tokens = _worker_tokens(arch_model(family), len(PROMPTS))
    assert prompts_a_step == len(PROMPTS)
    assert tokens == reference
    assert len({tuple(t) for t in reference.values()}) >= len(PROMPTS) - 1


@pytest.mark.parametrize("family", FAMILIES)
def test_worker_requests_joining_mid_flight_equal_alone(
    family: str, arch_model: ArchModel, alone: Callable[[str], dict[str, list[int]]]
) -> None:
    """Two prompts of different lengths join a batch that is decoding two others."""
    rec = _recorder(arch_model(family), len(PROMPTS))
    rec.submit("a", PROMPTS["a"], max_tokens=TOKENS)
    rec.submit("b", PROMPTS["b"], max_tokens=TOKENS)
    rec.step(8)
    assert 0 < len(rec.tokens["a"]) < TOKENS  # a is decoding
    rec.submit("d", PROMPTS["d"], max_tokens=TOKENS)
    rec.submit("c", PROMPTS["c"], max_tokens=TOKENS)
    rec.run()
    rec.close()
    assert dict(rec.tokens) == alone(family)


def test_worker_prefills_one_prompt_per_step_when_nemotron_cannot_be_corrected(
    arch_model: ArchModel, monkeypatch
) -> None:
    """mlx-lm's method, and a "correction" that is no better (mlx-lm's own again): the
    load check finds both wrong, and the worker prefills one prompt per step, which
    gives each prompt the tokens it gets alone."""
    monkeypatch.setattr(NemotronHMamba2Mixer, "_ssm", ssm_lengths.LIBRARY_SSM)
    if ssm_lengths.right_when_batched(ssm_lengths.LIBRARY_SSM):
        pytest.skip(
            "this mlx-lm's Nemotron-H method is right in a batch: nothing to fall back from"
        )
    monkeypatch.setattr(ssm_lengths, "CORRECTED_SSM", ssm_lengths.LIBRARY_SSM)
    reference = _worker_tokens(arch_model("nemotron_h"), 1)[1]
    prompts_a_step, tokens = _worker_tokens(arch_model("nemotron_h"), len(PROMPTS))
    assert NemotronHMamba2Mixer._ssm is ssm_lengths.LIBRARY_SSM
    assert prompts_a_step == 1
    assert tokens == reference
