"""What a coding client needs of a model, and which served model ``connect`` picks
for it.

Each client's first request (system prompt, default tools, the user's message) was
captured from the real client and counted (GPT-2's BPE, 50k tokens; a model's own
tokenizer lands within a few percent, e.g. SmolLM2's gave 20,328 for Claude Code's).
A model must hold that request plus :attr:`Needs.room` to work in (the answer, tool
results, a few more turns before the client compacts).

The choice, among the chat models that fit in memory: one whose context holds
``tokens + room``, tool-capable first (its ``tool_call_parser`` is not ``none``),
then the longest context, then the config's order. Models whose context is not
known yet (``context_length: auto`` before their worker ran) come after those known
to hold it. When none does, :class:`NoModelHolds` says so with the numbers.

Each client also has a watchdog: how long it waits for an answer before it gives up
(:attr:`Needs.watchdog`, read from the client's own source at the version measured).
Where the gateway measured a model's prefill speed (``prefill_tps`` in
``/v1/models``, from its worker's heartbeats), :func:`slow_note` warns when reading
the first request would take longer than that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mlx_gateway.supervisor.connect.files import ConnectError


@dataclass(frozen=True)
class Needs:
    label: str
    """The client as users name it (``Claude Code``)."""
    tokens: int
    """Its first request with its default tools, in tokens (measured)."""
    measured_on: str
    """The client version that was measured (``2.1.197``)."""
    room: int = 8192
    """Tokens beyond the first request a model's context must have to be usable."""
    tools: bool = True
    """It calls tools, so a tool-capable model is preferred."""
    default_max_tokens: int | None = None
    """The completion budget it asks for unless told otherwise."""
    system_tokens: int = 0
    """Of ``tokens``: its system prompt (instructions)."""
    tool_tokens: int = 0
    """Of ``tokens``: its tool definitions."""
    tool_count: int = 0
    """How many tools it sends."""
    watchdog: float = 0.0
    """Seconds it waits for an answer before giving up (0: none known)."""
    watchdog_setting: str = ""
    """The setting that changes :attr:`watchdog`, as the client names it."""
    api: Literal["anthropic", "responses"] = "responses"
    """The API it talks: ``connect --check`` counts its request on that API's route."""

    @property
    def needed(self) -> int:
        return self.tokens + self.room


@dataclass(frozen=True)
class Candidate:
    name: str
    window: int | None
    """Its context length in tokens (``None``: not known yet)."""
    tools: bool = True


class NoModelHolds(ConnectError):
    """No served chat model has a context that holds the client's first request."""


def _fmt(n: int) -> str:
    return f"{n:,}"


def choose(candidates: list[Candidate], needs: Needs) -> tuple[Candidate, list[str]]:
    """The model for a client with ``needs``, and notes to print; raises
    :class:`NoModelHolds` when none holds its first request."""
    holding = [c for c in candidates if c.window is not None and c.window >= needs.needed]
    if holding:
        ranked = sorted(holding, key=lambda c: (not c.tools, -(c.window or 0)))
        return ranked[0], []
    unknown = [c for c in candidates if c.window is None]
    if unknown:
        ranked = sorted(unknown, key=lambda c: not c.tools)
        return ranked[0], [
            f"the context of {ranked[0].name} is not known until its worker runs; "
            f"{needs.label} needs {_fmt(needs.needed)} tokens "
            "(run `mlx-gateway connect … --check` once it has loaded)"
        ]
    raise NoModelHolds(too_short(candidates, needs))


def too_short(candidates: list[Candidate], needs: Needs) -> str:
    known = [c for c in candidates if c.window is not None]
    longest = max(known, key=lambda c: c.window or 0)
    sizes = ", ".join(f"{c.name} {_fmt(c.window or 0)}" for c in known)
    return (
        f"{needs.label} sends about {_fmt(needs.tokens)} tokens in its first request "
        f"(measured on {needs.measured_on}) and needs about {_fmt(needs.room)} more to "
        f"work; the longest context here is {_fmt(longest.window or 0)} ({longest.name}; "
        f"all: {sizes}). Serve a model with a longer context (`context_length: 32768` "
        "or `context_length: auto` in its entry, if the model was trained for it), or "
        "name one with --model; --force writes the configuration anyway"
    )


def fits_note(
    model: str, window: int | None, needs: Needs, tokens: int | None = None
) -> str | None:
    """A warning when ``model`` (named with --model) cannot hold the first request
    (``tokens``: as the model counts it; default the measured figure)."""
    tokens = needs.tokens if tokens is None else tokens
    if window is None or window >= tokens + needs.room:
        return None
    return (
        f"{model} has a {_fmt(window)}-token context; {needs.label} sends about "
        f"{_fmt(tokens)} tokens in its first request and needs about "
        f"{_fmt(needs.room)} more to work"
    )


def output_cap(window: int, needs: Needs) -> int:
    """The completion budget to tell a client: a quarter of the context (at least
    1,024 tokens), never more than the client's own default."""
    cap = max(1024, window // 4)
    if needs.default_max_tokens is not None:
        cap = min(cap, needs.default_max_tokens)
    return cap


def prefill_seconds(tokens: int, rate: float) -> float:
    """Seconds to read ``tokens`` of prompt at ``rate`` tokens per second."""
    return tokens / rate


def slow_note(
    model: str, rate: float | None, needs: Needs, tokens: int | None = None
) -> str | None:
    """A warning when reading the first request (``tokens``, default the measured
    figure) at ``model``'s measured prefill ``rate`` takes longer than the client's
    watchdog; ``None`` when it does not, or when either is not known."""
    if rate is None or rate <= 0 or needs.watchdog <= 0:
        return None
    tokens = needs.tokens if tokens is None else tokens
    seconds = prefill_seconds(tokens, rate)
    if seconds <= needs.watchdog:
        return None
    return (
        f"{model} reads prompts at about {rate:,.0f} tokens/s (measured by its worker): "
        f"{needs.label}'s first request of about {_fmt(tokens)} tokens takes about "
        f"{seconds:,.0f} s to read, longer than the {needs.watchdog:,.0f} s {needs.label} "
        f"waits ({needs.watchdog_setting}). Raise that setting, or choose a smaller or "
        "faster model (--model)"
    )
