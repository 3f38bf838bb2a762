"""Per-request admission by KV cache bytes in the vlm worker, as in the lm worker
(the tiny random Qwen2-VL: 2 layers, 2 KV heads 16 wide, fp16 KV = 256 bytes a
token): a request that could never fit gets 400 ``memory_admission``, one without
``max_tokens`` is capped at what fits, one that fits only once others finish waits,
and what the budget leaves now (``Limits``) holds requests back."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlx_gateway.protocol.messages import Limits

from .test_vlm_backend import Run, ask, encode, picture

pytestmark = pytest.mark.slow

PER_TOKEN = 2 * 2 * 2 * 16 * 4  # layers, keys and values, KV heads, head size, float32


def test_the_vlm_worker_admits_requests_by_kv_bytes(tiny_vlm_path: Path) -> None:
    run = Run(tiny_vlm_path, options={"kv_budget_bytes": PER_TOKEN * 300})
    assert run.backend.kv_admission.full_per_token == PER_TOKEN
    image = [encode(picture())]  # each request carries an image: a vision prompt
    run.submit(ask("big", max_tokens=500), image)
    error = run.error("big")
    assert (error.status, error.code, error.param) == (400, "memory_admission", "max_tokens")
    assert "+ 500 max_tokens" in error.message
    # Without max_tokens: capped at what fits.
    capped = ask("capped")
    capped.sampling.max_tokens = None
    run.submit(capped, image)
    run.drain()
    done = run.done("capped")
    assert done.usage.prompt_tokens + done.usage.completion_tokens <= 300
    assert done.finish_reason == "length"
    # Two that fit only one at a time: the second waits for the first.
    run.submit(ask("one", max_tokens=150), image)
    run.submit(ask("two", max_tokens=150), image)
    run.backend.step()
    assert run.backend.counts() == (1, 1)
    run.drain()
    assert run.done("one").usage.completion_tokens <= 150
    assert run.done("two").finish_reason in ("stop", "length")
    # What the budget leaves now (another model took memory) holds requests back too.
    run.backend.set_limits(Limits(kv_free=PER_TOKEN * 200))
    run.submit(ask("three", max_tokens=100), image)
    run.submit(ask("four", max_tokens=100), image)
    run.backend.step()
    assert run.backend.counts() == (1, 1)
    run.drain()
    run.backend.close()
