"""A hybrid model through the real gateway: the official OpenAI client sees an
agent's next turn and a new question under the same system prompt served from the
worker's checkpoints (``usage.prompt_tokens_details.cached_tokens``), and the
Anthropic client sees the same reuse on ``/v1/messages``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from .gateway import Gateway

pytestmark = pytest.mark.slow

SYSTEM = " ".join(f"Rule {i}: answer briefly and cite the tool output." for i in range(22))


@pytest.fixture(scope="module")
def gateway(
    arch_model: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    gw = Gateway(
        tmp_path_factory.mktemp("gw-hybrid"),
        [
            {
                "served_model_name": "hybrid",
                "model_path": str(arch_model("qwen3_next")),
                "idle_timeout": 0,
            }
        ],
    )
    yield gw
    gw.stop()


def cached(usage: object) -> int:
    details = getattr(usage, "prompt_tokens_details", None)
    return int(getattr(details, "cached_tokens", 0) or 0)


def test_turns_of_a_hybrid_model_reuse_the_cache(gateway: Gateway) -> None:
    client = openai.OpenAI(base_url=f"{gateway.base_url}/v1", api_key="unused")
    system = {"role": "system", "content": SYSTEM}
    turn1 = [system, {"role": "user", "content": "What does rule 3 say?"}]
    first = client.chat.completions.create(
        model="hybrid",
        messages=turn1,
        max_tokens=8,
        temperature=0,  # type: ignore[arg-type]
    )
    assert first.usage is not None and cached(first.usage) == 0
    reply = first.choices[0].message.content or ""
    turn2 = [*turn1, {"role": "assistant", "content": reply}, {"role": "user", "content": "And 7?"}]
    second = client.chat.completions.create(
        model="hybrid",
        messages=turn2,
        max_tokens=8,
        temperature=0,  # type: ignore[arg-type]
    )
    assert second.usage is not None
    assert cached(second.usage) >= first.usage.prompt_tokens - 1
    other = [system, {"role": "user", "content": "Quote rule 19."}]
    third = client.chat.completions.create(
        model="hybrid",
        messages=other,
        max_tokens=8,
        temperature=0,  # type: ignore[arg-type]
    )
    assert third.usage is not None
    # The whole system prompt came from its checkpoint.
    assert cached(third.usage) > third.usage.prompt_tokens - 40

    messages = anthropic.Anthropic(base_url=gateway.base_url, api_key="unused")
    reply_a = messages.messages.create(
        model="hybrid",
        system=SYSTEM,
        max_tokens=8,
        messages=[{"role": "user", "content": "Is rule 5 about tools?"}],
    )
    assert (reply_a.usage.cache_read_input_tokens or 0) > 700
