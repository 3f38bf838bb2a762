"""Per-request samplers and the OpenAI penalties."""

from __future__ import annotations

import mlx.core as mx
import pytest

from mlx_gateway.protocol.messages import SamplingParams
from mlx_gateway.workers.common.sampling import (
    make_openai_penalties,
    make_request_processors,
    make_request_sampler,
)


def test_penalties_count_only_the_completion() -> None:
    penalize = make_openai_penalties(presence=0.5, frequency=1.0, prompt_tokens=2)
    tokens = mx.array([1, 1, 3, 3, 2])  # prompt [1, 1], completion [3, 3, 2]
    logits = mx.zeros((1, 5))
    out = penalize(tokens, logits)
    assert out.tolist() == [[0.0, 0.0, -1.5, -2.5, 0.0]]


def test_penalties_do_nothing_before_the_first_token() -> None:
    penalize = make_openai_penalties(presence=0.5, frequency=1.0, prompt_tokens=3)
    logits = mx.ones((1, 4))
    assert penalize(mx.array([1, 2, 3]), logits).tolist() == [[1.0] * 4]


def test_processors_only_when_asked() -> None:
    assert make_request_processors(SamplingParams(), 5) == []
    params = SamplingParams(repetition_penalty=1.2, presence_penalty=0.1)
    assert len(make_request_processors(params, 5)) == 2


def test_unseeded_requests_with_equal_settings_share_a_sampler() -> None:
    a = make_request_sampler(SamplingParams(temperature=0.7))
    b = make_request_sampler(SamplingParams(temperature=0.7))
    assert a is b
    assert make_request_sampler(SamplingParams(temperature=0.0)) is make_request_sampler(
        SamplingParams(temperature=0.0, seed=3)
    )


@pytest.mark.parametrize("top_p", [1.0, 0.9])
def test_seed_reproduces_the_draws(top_p: float) -> None:
    logprobs = mx.log(mx.softmax(mx.random.normal((1, 50), key=mx.random.key(0))))

    def draws(seed: int) -> list[int]:
        sampler = make_request_sampler(SamplingParams(temperature=1.0, top_p=top_p, seed=seed))
        return [sampler(logprobs).item() for _ in range(20)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)
