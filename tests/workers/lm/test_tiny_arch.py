"""The tiny models of :mod:`tests.fixtures.tiny_arch`: each family loads through
``mlx_lm.load``, its layer kinds really mix, and greedy answers depend on the prompt
(a model that answers everything alike would hide a cache or batching bug)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mlx_lm import generate, load
from mlx_lm.models.cache import CacheList, RotatingKVCache, make_prompt_cache
from mlx_lm.sample_utils import make_sampler

from ...fixtures.tiny_arch import FAMILIES, WINDOW, build_arch

pytestmark = pytest.mark.slow

PROMPTS = (
    "The quick brown fox jumps over the lazy dog, and the dog sleeps on.",
    "hello world, this is a tiny test corpus: count the steps and stop when done!",
)

RECURRENT, WINDOWED, PLAIN = "ArraysCache", "RotatingKVCache", "KVCache"
LAYER_KINDS = {
    "llama": {PLAIN},
    "qwen3_next": {RECURRENT, PLAIN},
    "qwen3_5": {RECURRENT, PLAIN},
    "gemma3_text": {WINDOWED, PLAIN},
    "gpt_oss": {WINDOWED, PLAIN},
    "lfm2": {RECURRENT, PLAIN},
    "nemotron_h": {RECURRENT, PLAIN},
    "falcon_h1": {RECURRENT, PLAIN},
    "granitemoehybrid": {RECURRENT, PLAIN},
}
"""The cache classes each family's layers must have (recurrent or conv state, sliding
windows, plain attention)."""


def _kinds(cache: list[Any]) -> set[str]:
    """The cache classes of a model's layers (those inside a CacheList too)."""
    kinds = set()
    for layer in cache:
        inner = layer.caches if isinstance(layer, CacheList) else [layer]
        kinds |= {type(c).__name__ for c in inner}
    return kinds


def test_the_families_are_the_ones_issue_32_names() -> None:
    assert set(FAMILIES) >= set(LAYER_KINDS)


@pytest.mark.parametrize("family", FAMILIES)
def test_family_loads_mixes_layer_kinds_and_answers_by_prompt(
    family: str, arch_model: Callable[[str], Path]
) -> None:
    model, tokenizer, config = load(str(arch_model(family)), return_config=True)
    assert config["model_type"] == family
    cache = make_prompt_cache(model)
    assert _kinds(cache) == LAYER_KINDS[family]
    for layer in cache:
        if isinstance(layer, RotatingKVCache):
            assert layer.max_size == WINDOW
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": p}],
            add_generation_prompt=True,
        )
        for p in PROMPTS
    ]
    assert min(len(p) for p in prompts) > WINDOW  # the windows really slide
    answers = [
        generate(model, tokenizer, p, max_tokens=12, sampler=make_sampler(temp=0.0))
        for p in prompts
    ]
    assert answers[0] != answers[1]
    assert all(len(set(a)) > 3 for a in answers), answers  # not one token over and over


def test_build_is_deterministic(tmp_path: Path) -> None:
    first = build_arch("nemotron_h", tmp_path / "a")
    second = build_arch("nemotron_h", tmp_path / "b")
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_unknown_family_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no tiny 'mamba9'"):
        build_arch("mamba9", tmp_path)
