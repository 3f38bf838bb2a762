"""The thinking-budget logits processor on MLX arrays: it counts the tokens inside a
block (opened by the prompt or by the model), forces the end marker at the limit,
and leaves a block the model closed by itself alone."""

from __future__ import annotations

import mlx.core as mx

from mlx_gateway.workers.lm.thinking_budget import ThinkingBudget

START, END = [7], [8, 9]  # a two-token end marker, as some families have
VOCAB = 16


def run(budget: ThinkingBudget, prompt: list[int], wanted: list[int]) -> list[int]:
    """Generate greedily: each step the model "wants" the next of ``wanted``; returns
    what came out after the processor had its say."""
    tokens = list(prompt)
    out: list[int] = []
    for want in wanted:
        logits = mx.zeros((1, VOCAB)).at[0, want].add(1.0)
        token = int(mx.argmax(budget(mx.array(tokens), logits), axis=-1).item())
        tokens.append(token)
        out.append(token)
    return out


def test_block_opened_by_the_prompt_is_closed_at_the_budget() -> None:
    budget = ThinkingBudget(3, START, END, prompt_tokens=2, inside=True)
    assert run(budget, [1, 7], [2, 3, 4, 5, 6, 5]) == [2, 3, 4, 8, 9, 5]
    assert budget.forced == 1


def test_block_opened_by_the_model() -> None:
    budget = ThinkingBudget(2, START, END, prompt_tokens=1, inside=False)
    assert run(budget, [1], [2, 7, 3, 4, 5, 6]) == [2, 7, 3, 4, 8, 9]


def test_a_block_closed_in_time_is_left_alone() -> None:
    budget = ThinkingBudget(4, START, END, prompt_tokens=1, inside=True)
    assert run(budget, [1], [2, 8, 9, 3, 4, 5, 6]) == [2, 8, 9, 3, 4, 5, 6]
    assert budget.forced == 0


def test_budget_zero_closes_at_once() -> None:
    budget = ThinkingBudget(0, START, END, prompt_tokens=1, inside=True)
    assert run(budget, [1], [2, 3, 4]) == [8, 9, 4]
