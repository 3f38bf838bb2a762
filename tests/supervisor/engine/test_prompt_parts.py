"""Where a prompt left the model's recent prompts: parts compared by digest."""

from __future__ import annotations

from mlx_gateway.supervisor.engine.prompt_parts import PromptHistory, parts_of

SYSTEM = {"role": "system", "content": "You are a coding agent."}
TOOLS = [{"name": "Read"}, {"name": "Bash"}]


def chat(*texts: str) -> list[dict[str, str]]:
    roles = ["user", "assistant"]
    return [SYSTEM, *({"role": roles[i % 2], "content": t} for i, t in enumerate(texts))]


def test_a_next_turn_extends_its_conversation() -> None:
    history = PromptHistory()
    assert history.note("m", parts_of(chat("hi"), TOOLS)) is None  # nothing before it
    assert history.note("m", parts_of(chat("hi", "hello", "more"), TOOLS)) is None
    assert history.note("m", parts_of(chat("hi", "hello", "more"), TOOLS)) is None  # a retry


def test_the_first_part_that_differs_is_named() -> None:
    history = PromptHistory()
    history.note("m", parts_of(chat("hi", "hello", "more"), TOOLS))
    rewritten = history.note("m", parts_of(chat("hi", "HELLO", "more"), TOOLS))
    assert rewritten is not None
    assert (rewritten.part, rewritten.shared_parts) == ("messages[2]", 3)
    other_tools = history.note("m", parts_of(chat("hi"), [{"name": "Read"}]))
    assert other_tools is not None and other_tools.part == "tools"
    # A shorter prompt that ends inside a longer one (an edit that dropped turns).
    shorter = history.note("m", parts_of(chat("hi", "hello"), TOOLS))
    assert shorter is not None and shorter.part is None and shorter.shared_parts == 4


def test_the_closest_recent_prompt_is_the_one_compared() -> None:
    history = PromptHistory()
    history.note("m", parts_of(chat("session one"), TOOLS))
    history.note("m", parts_of([{"role": "user", "content": "unrelated"}]))
    miss = history.note("m", parts_of(chat("session two"), TOOLS))
    assert miss is not None and miss.part == "messages[1]"  # after the shared system
    # Other models' prompts are not compared, and nothing shared is no miss.
    assert history.note("other", parts_of(chat("session two"), TOOLS)) is None
    assert history.note("m", parts_of([{"role": "user", "content": "new"}], [{"x": 1}])) is None


def test_surface_labels_and_bounds() -> None:
    history = PromptHistory(per_model=2, models=1)
    labels = ["system", "messages[0]"]
    history.note("m", parts_of(chat("a"), labels=labels))
    miss = history.note("m", parts_of(chat("b"), labels=labels))
    assert miss is not None and miss.part == "messages[0]"
    history.note("n", parts_of(chat("a")))  # one model remembered: m is forgotten
    assert history.note("m", parts_of(chat("c"))) is None
