"""Thinking control: whether a hybrid model thinks, and for how many tokens at most.

Every API comes down to two settings: ``enable_thinking`` (the chat template's
variable, mlx-vlm's top-level field) and ``thinking_budget`` (the most tokens inside
one thinking block; the worker then closes the block and the model answers). Each
API's own vocabulary maps onto them; the top-level fields, when sent, win:

=================================  ==================  =================
request                            ``enable_thinking``  ``thinking_budget``
=================================  ==================  =================
``reasoning_effort`` /             ``none``,            ``low``: 1024,
``reasoning.effort``               ``minimal``: off,    ``medium``: 4096,
                                   others: on           others: none
Anthropic ``thinking``             ``enabled``: on,     ``budget_tokens``
                                   ``disabled``: off,
                                   ``adaptive``: model
=================================  ==================  =================
"""

from __future__ import annotations

from dataclasses import dataclass

EFFORT_BUDGETS: dict[str, int | None] = {"low": 1024, "medium": 4096}
"""Thinking budgets of the ``reasoning_effort`` levels that have one (``high`` and
``xhigh``: no limit)."""
EFFORT_OFF = ("none", "minimal")


@dataclass(frozen=True)
class Thinking:
    """``None`` fields: the model's own default (its template's, no limit)."""

    enabled: bool | None = None
    budget: int | None = None


def from_effort(
    effort: str | None, enable_thinking: bool | None = None, thinking_budget: int | None = None
) -> Thinking:
    """The OpenAI ``reasoning_effort`` (chat) or ``reasoning.effort`` (Responses)."""
    enabled: bool | None = None
    budget: int | None = None
    if effort is not None:
        enabled = effort not in EFFORT_OFF
        budget = EFFORT_BUDGETS.get(effort) if enabled else None
    return _override(Thinking(enabled, budget), enable_thinking, thinking_budget)


def from_anthropic(
    kind: str | None,
    budget_tokens: int | None,
    enable_thinking: bool | None = None,
    thinking_budget: int | None = None,
) -> Thinking:
    """Anthropic's ``thinking: {type, budget_tokens}`` (``kind`` ``None``: not sent)."""
    enabled: bool | None = None
    budget: int | None = None
    if kind == "enabled":
        enabled, budget = True, budget_tokens
    elif kind == "disabled":
        enabled = False
    return _override(Thinking(enabled, budget), enable_thinking, thinking_budget)


def _override(base: Thinking, enabled: bool | None, budget: int | None) -> Thinking:
    return Thinking(
        enabled=base.enabled if enabled is None else enabled,
        budget=base.budget if budget is None else budget,
    )
