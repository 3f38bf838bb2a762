"""KV cache quantization (``kv_bits``) and a bounded cache (``max_kv_size``) on a
real tiny llama (random fp16 weights, head size 32): the KV bytes the worker
reports for a long prompt halve at 8 bits and fall to about a quarter at 4 bits,
and greedy output stays close to the fp16 cache's."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import pytest

from mlx_gateway.protocol.messages import Error
from mlx_gateway.workers.runtime.contract import LoadError
from tests.fixtures.tiny_models import build_tiny_lm

from ..lm_recorder import PROMPTS, Recorder

pytestmark = pytest.mark.slow

LONG = PROMPTS["d"] * 8  # about 470 tokens
NEW_TOKENS = 16
GROUP = 32


@pytest.fixture(scope="module")
def fp16_lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny llama with 8 heads of 32 (hidden 256), its weights stored as fp16
    (so its KV cache is fp16, as a real model's)."""
    out = build_tiny_lm(tmp_path_factory.mktemp("kv") / "lm", hidden=256, layers=2)
    weights = mx.load(str(out / "model.safetensors"))
    mx.save_safetensors(
        str(out / "model.safetensors"),
        {k: v.astype(mx.float16) for k, v in weights.items()},
        metadata={"format": "mlx"},
    )
    return out


def prefill_and_measure(model: Path, **options: object) -> tuple[int, list[int]]:
    """KV bytes of the long prompt once prefilled, and the greedy tokens after it."""
    rec = Recorder(model, prompt_cache_bytes=0, **options)
    # The whole prompt in one prefill step, as in every run: the cache's buffers grow
    # in steps of 256 tokens per write, so the bytes depend on how the prompt was cut
    # (which the worker otherwise sizes from the measured speed).
    pace = rec.backend.scheduler.pace
    pace.slice = lambda rows=1: pace.most  # type: ignore[method-assign]
    rec.submit("long", LONG, max_tokens=NEW_TOKENS)
    while rec.backend.scheduler._solo is None or rec.backend.scheduler._solo.solo.prefilling:
        rec.step()
    rec.step()  # the first token: the whole prompt is in the cache
    active, kept, _ = rec.backend.kv_bytes()
    rec.run()
    assert kept == 0
    tokens = rec.tokens["long"]
    rec.close()
    return active, tokens


@pytest.fixture(scope="module")
def fp16_run(fp16_lm: Path) -> tuple[int, list[int]]:
    return prefill_and_measure(fp16_lm)


def test_kv_bits_halve_and_quarter_the_kv_bytes_and_greedy_stays_close(
    fp16_lm: Path, fp16_run: tuple[int, list[int]]
) -> None:
    plain, reference = fp16_run
    eight, tokens8 = prefill_and_measure(fp16_lm, kv_bits=8, kv_group_size=GROUP)
    four, tokens4 = prefill_and_measure(fp16_lm, kv_bits=4, kv_group_size=GROUP)
    # fp16: 2 bytes an element; 8 bits: 1 + 4/32 (an fp16 scale and bias per group
    # of 32); 4 bits: 0.5 + 4/32. Cache buffers grow in steps of 256 tokens alike.
    assert plain > 0
    assert eight == pytest.approx(plain * 1.125 / 2, rel=0.02), (plain, eight)
    assert four == pytest.approx(plain * 0.625 / 2, rel=0.02), (plain, four)
    assert len(tokens8) == len(reference) == NEW_TOKENS
    same8 = sum(a == b for a, b in zip(tokens8, reference, strict=True))
    same4 = sum(a == b for a, b in zip(tokens4, reference, strict=False))
    # Seen: 16 of 16 equal at 8 and at 4 bits; the bounds leave room for other BLAS.
    assert tokens8[:8] == reference[:8] and same8 >= NEW_TOKENS * 3 // 4, (same8, same4)
    assert same4 >= NEW_TOKENS // 2, same4


def test_quantization_starts_at_quantized_kv_start(
    fp16_lm: Path, fp16_run: tuple[int, list[int]]
) -> None:
    plain, _ = fp16_run
    late, _ = prefill_and_measure(
        fp16_lm, kv_bits=8, kv_group_size=GROUP, quantized_kv_start=100_000
    )
    assert late == plain  # the sequence never got that long: fp16 throughout


def test_a_group_size_that_does_not_divide_the_head_is_refused(tiny_lm_path: Path) -> None:
    with pytest.raises(LoadError, match="kv_group_size 32 does not divide") as info:
        Recorder(tiny_lm_path, kv_bits=8, kv_group_size=32)  # its heads are 16 wide
    assert "cannot quantize this model's KV cache" in str(info.value)


def test_max_kv_size_bounds_the_cache_in_the_batch(fp16_lm: Path) -> None:
    rec = Recorder(fp16_lm, prompt_cache_bytes=0, max_kv_size=128, solo_check=False)
    assert not rec.backend.scheduler.solo_enabled  # a rotating window cannot decode solo
    rec.submit("long", LONG, max_tokens=NEW_TOKENS)
    rec.run()
    assert not [r for r in rec.replies if isinstance(r, Error)]
    assert rec.done("long").usage.completion_tokens == NEW_TOKENS
    rec.close()


def test_kv_bits_with_max_kv_size_is_refused(fp16_lm: Path) -> None:
    with pytest.raises(LoadError, match="kv_bits needs a model"):
        Recorder(fp16_lm, kv_bits=8, kv_group_size=GROUP, max_kv_size=128, solo_check=False)


def test_a_quantized_solo_request_moves_into_the_batch_and_its_cache_is_kept(
    fp16_lm: Path,
) -> None:
    rec = Recorder(fp16_lm, kv_bits=8, kv_group_size=GROUP)
    rec.submit("first", LONG, max_tokens=NEW_TOKENS)
    rec.step(3)  # prefilled and decoding alone, its cache quantized
    assert rec.backend.scheduler._solo is not None
    rec.submit("second", "hello world", max_tokens=4)
    rec.run()  # the first joins the batch with its cache back in fp16
    assert not [r for r in rec.replies if isinstance(r, Error)]
    assert rec.done("first").usage.completion_tokens == NEW_TOKENS
    assert rec.done("second").usage.completion_tokens == 4
    rec.submit("again", LONG, max_tokens=2)  # the kept cache serves the same prompt
    rec.run()
    assert rec.done("again").usage.cached_tokens > 400
    rec.close()
