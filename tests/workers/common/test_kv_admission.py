"""Per-request admission by KV cache bytes in the lm worker (real tiny llama:
2 layers, 2 KV heads 16 wide, fp16 KV = 256 bytes a token): a request that
could never fit gets 400 ``memory_admission`` naming the numbers, one without
``max_tokens`` is capped at what fits, and one that fits only once others finish
waits in the queue."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlx_gateway.protocol.messages import Error, Generate, Limits, SamplingParams, Started
from mlx_gateway.workers.runtime.contract import RequestError

from ..lm_recorder import Recorder

pytestmark = pytest.mark.slow

PER_TOKEN = 2 * 2 * 2 * 16 * 4  # layers, keys and values, KV heads, head size, float32


def errors(rec: Recorder) -> list[Error]:
    return [r for r in rec.replies if isinstance(r, Error)]


def test_a_request_that_never_fits_gets_400_memory_admission(tiny_lm_path: Path) -> None:
    rec = Recorder(tiny_lm_path, kv_budget_bytes=PER_TOKEN * 300, prompt_cache_bytes=0)
    with pytest.raises(RequestError) as info:  # the serve loop answers it as an Error
        rec.submit("big", "hello world", max_tokens=500)
    error = info.value.to_error("big")
    assert (error.status, error.code, error.param) == (400, "memory_admission", "max_tokens")
    assert "+ 500 max_tokens" in error.message and "153.6 kB the memory budget" in error.message
    assert "lower max_tokens" in error.message
    rec.submit("fits", "hello world", max_tokens=50)
    rec.run()
    assert rec.done("fits").usage.completion_tokens == 50
    rec.close()


def test_without_max_tokens_the_completion_is_capped_at_what_fits(tiny_lm_path: Path) -> None:
    rec = Recorder(tiny_lm_path, kv_budget_bytes=PER_TOKEN * 120, prompt_cache_bytes=0)
    rec.backend.submit(
        Generate(
            request_id="open",
            messages=[{"role": "user", "content": "hello world"}],
            sampling=SamplingParams(temperature=0.0),  # no max_tokens
        ),
        [],
    )
    rec.run()
    assert not errors(rec)
    done = rec.done("open")
    assert done.finish_reason == "length"
    assert done.usage.prompt_tokens + done.usage.completion_tokens == 120
    rec.close()


def prompt_tokens(model: Path, content: str) -> int:
    rec = Recorder(model, prompt_cache_bytes=0)
    rec.submit("probe", content, max_tokens=1)
    rec.run()
    rec.close()
    return next(r.prompt_tokens for r in rec.replies if isinstance(r, Started))


def test_a_request_waits_until_running_ones_free_their_kv(tiny_lm_path: Path) -> None:
    # Room for two requests of their prompt + 50 completion tokens, not three.
    each = prompt_tokens(tiny_lm_path, "hello world") + 50
    rec = Recorder(
        tiny_lm_path, solo=False, kv_budget_bytes=PER_TOKEN * each * 5 // 2, prompt_cache_bytes=0
    )
    for name in ("one", "two", "three"):
        rec.submit(name, "hello world", max_tokens=50)
    rec.step()
    assert rec.backend.counts() == (2, 1)  # the third waits for memory, not for a slot
    rec.run()
    assert not errors(rec)
    assert all(rec.done(n).usage.completion_tokens == 50 for n in ("one", "two", "three"))
    rec.close()


def test_what_the_budget_leaves_now_holds_requests_back(tiny_lm_path: Path) -> None:
    each = prompt_tokens(tiny_lm_path, "hello world") + 50
    rec = Recorder(
        tiny_lm_path, solo=False, kv_budget_bytes=PER_TOKEN * 10_000, prompt_cache_bytes=0
    )
    # Another model took most of the budget: room for one request's KV, not two.
    rec.backend.set_limits(Limits(kv_free=PER_TOKEN * each * 3 // 2))
    assert rec.backend.kv_bytes()[2] == PER_TOKEN * each * 3 // 2
    for name in ("one", "two"):
        rec.submit(name, "hello world", max_tokens=50)
    rec.step()
    assert rec.backend.counts() == (1, 1)
    rec.backend.set_limits(Limits(kv_free=PER_TOKEN * 10_000))  # the other model left
    rec.step()
    assert rec.backend.counts() == (2, 0)
    rec.run()
    assert not errors(rec)
    rec.close()
