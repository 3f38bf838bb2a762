"""The context-overflow policy of a model (``context_overflow`` in its entry): what a
chat prompt that does not fit in the context becomes.

* ``error``: the worker's 400 ``context_length_exceeded`` as it is;
* ``truncate``: the oldest turns (a user message and what followed it) are dropped,
  system messages kept, until prompt + ``max_tokens`` fits (the last turn is always
  kept); the response says so in the header ``X-Context-Overflow``. Where the model
  cuts a budget the context cannot hold (``max_tokens_overflow: clamp``), the room
  kept for the answer is the cut budget: ``max_tokens``, but at most
  1/:data:`CLAMPED_SHARE` of the context (a request asking for 32,000 tokens of a
  32k model keeps 8,192, not the whole context);
* ``summarize``: the messages before the last :data:`KEEP_LAST` (system messages
  aside) are summarized by the same model, the summary joins the system message,
  and the turn is tried again.

Either way, a conversation that still does not fit is the 400
``context_length_exceeded``. The prompt is measured by the worker (its tokenizer
and chat template, with a :class:`CountTokens`), so what fits is exact.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from uuid import uuid4

from mlx_gateway.protocol.messages import CountTokens, Done, SamplingParams
from mlx_gateway.supervisor.errors import ContextLengthExceeded, GatewayError
from mlx_gateway.supervisor.notes import add_header
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.worker_call import WorkerCall

HEADER = "X-Context-Overflow"
KEEP_LAST = 6
"""Non-system messages that ``summarize`` keeps as they are."""
CLAMPED_SHARE = 4
"""With ``max_tokens_overflow: clamp``, truncation leaves at most this share of the
context (a quarter) for the answer, whatever ``max_tokens`` asked."""
SUMMARY_TOKENS = 256
"""Most tokens of a summary (less when the context is small)."""
SUMMARY_PROMPT = (
    "Summarize the conversation below in a few sentences: the facts, decisions and "
    "open questions a reader needs to continue it. Write only the summary."
)
SUMMARY_LEAD = "Summary of the earlier conversation:"

Messages = list[dict[str, Any]]
Summarizer = Callable[[Messages, int], Awaitable[str]]
"""Runs the model on ``messages`` for at most that many tokens; returns its text."""


async def count_tokens(
    handle: ModelHandle,
    messages: Messages,
    kwargs: dict[str, Any],
    files: Sequence[bytes] = (),
    images: list[int] | None = None,
) -> int:
    """The prompt tokens of ``messages`` as the worker renders them (vision models:
    with the image and audio ``files``, ``images`` naming the image parts' frames)."""
    msg = CountTokens(
        request_id=f"count-{uuid4().hex}",
        messages=messages,
        chat_template_kwargs=kwargs,
        images=images or [],
    )
    tokens: int | None = None
    async with WorkerCall(handle, msg, files) as call:
        async for reply in call:
            if isinstance(reply, Done):
                tokens = reply.usage.prompt_tokens
    if tokens is None:
        raise GatewayError("The worker ended a token count without a result.")
    return tokens


def turns_of(messages: Messages) -> tuple[Messages, list[Messages]]:
    """The system messages, and the rest cut into turns: each starts at a user
    message (what comes before the first one is a turn of its own)."""
    systems = [m for m in messages if m.get("role") in ("system", "developer")]
    turns: list[Messages] = []
    for message in messages:
        if message.get("role") in ("system", "developer"):
            continue
        if not turns or message.get("role") == "user":
            turns.append([])
        turns[-1].append(message)
    return systems, turns


def answer_room(exc: ContextLengthExceeded, clamp: bool) -> int:
    """The tokens a truncated prompt leaves for the answer: ``max_tokens`` (1 when
    none was asked); with ``clamp``, at most 1/:data:`CLAMPED_SHARE` of the context,
    since the worker cuts the budget to what the prompt leaves."""
    room = exc.max_tokens or 1
    return min(room, max(1, exc.limit // CLAMPED_SHARE)) if clamp else room


async def truncate(
    handle: ModelHandle,
    messages: Messages,
    kwargs: dict[str, Any],
    exc: ContextLengthExceeded,
    clamp: bool = False,
) -> Messages:
    """``messages`` without their oldest turns, so that they fit with
    :func:`answer_room` to spare; raises ``exc`` when even the last turn (with the
    system messages) does not."""
    systems, turns = turns_of(messages)
    room = answer_room(exc, clamp)
    for dropped in range(1, len(turns)):
        kept = [m for turn in turns[dropped:] for m in turn]
        candidate = [*systems, *kept]
        if await count_tokens(handle, candidate, kwargs) + room <= exc.limit:
            gone = sum(len(turn) for turn in turns[:dropped])
            add_header(HEADER, f"truncate; dropped_messages={gone}")
            return candidate
    raise exc


def _transcript(messages: Messages) -> str:
    lines = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        text = str(content or "")
        if m.get("tool_calls"):
            text += " " + json.dumps(m["tool_calls"])
        lines.append(f"{m.get('role', 'user')}: {text}")
    return "\n".join(lines)


async def summarize(
    messages: Messages,
    summarizer: Summarizer,
    count: Callable[[Messages], Awaitable[int]],
    exc: ContextLengthExceeded,
) -> Messages:
    """The system messages with the summary of the older messages added, then the
    last :data:`KEEP_LAST` non-system messages; raises ``exc`` when there is nothing
    older to summarize. Older messages too many for the summary's own prompt are
    summarized from the latest on (the oldest are left out)."""
    systems = [m for m in messages if m.get("role") in ("system", "developer")]
    rest = [m for m in messages if m.get("role") not in ("system", "developer")]
    older, recent = rest[:-KEEP_LAST], rest[-KEEP_LAST:]
    while recent and recent[0].get("role") == "tool":  # keep a call with its results
        older.append(recent.pop(0))
    if not older:
        raise exc
    budget = max(1, min(SUMMARY_TOKENS, exc.limit // 4))

    def request_for(part: Messages) -> Messages:
        return [
            {"role": "system", "content": SUMMARY_PROMPT},
            {"role": "user", "content": _transcript(part)},
        ]

    first = 0
    while await count(request_for(older[first:])) + budget > exc.limit:
        first += 1
        if first == len(older):
            raise exc
    request = request_for(older[first:])
    summary = (await summarizer(request, budget)).strip()
    note = f"{SUMMARY_LEAD}\n{summary}"
    if systems:
        head = systems[0]
        content = head.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        systems = [{**head, "content": f"{content or ''}\n\n{note}"}, *systems[1:]]
    else:
        systems = [{"role": "system", "content": note}]
    add_header(HEADER, f"summarize; summarized_messages={len(older)}")
    return [*systems, *recent]


def summary_sampling() -> SamplingParams:
    """Greedy: a summary should not vary between retries."""
    return SamplingParams(temperature=0.0)
