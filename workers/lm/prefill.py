"""What a batch step's prefill reached: the progress of long prompts (``Prefilled``),
the prompts it finished, and the checkpoints it came to (see :mod:`.checkpoints`;
planned as the request's ``marks`` when it joined the batch)."""

from __future__ import annotations

from typing import Any

from mlx_lm.generate import BatchGenerator

from mlx_gateway.protocol.messages import Prefilled
from mlx_gateway.workers.lm import checkpoints as cp
from mlx_gateway.workers.lm.active import LmActive
from mlx_gateway.workers.lm.prompt_cache import PromptCache
from mlx_gateway.workers.runtime.contract import Emit


def progress(
    prompts: list[Any],
    by_uid: dict[int, LmActive],
    generator: BatchGenerator,
    emit: Emit,
    cuts: bool,
    cache: PromptCache,
    read: bool = True,
) -> None:
    """Report long prompts' progress (``prompts``: the generator's prompt responses
    of a step; ``by_uid``: the running requests), note the prompts it finished and
    take the checkpoints it reached (``cuts``: the model's cache can be cut at any
    prefix, so only entries are stored, no checkpoints kept). ``read`` False: the
    step read no prompt (:mod:`.fair_share`), so no progress is reported."""
    due: list[LmActive] = []
    for response in prompts:
        active = by_uid.get(response.uid)
        if active is None:
            continue
        done, total = response.progress
        active.prefilled = active.prompt_tokens - (total - done)
        if response.end_of_prompt:
            active.decoding = True
            continue
        if response.end_of_segment and active.prefilled in active.marks:
            due.append(active)
        if total - done > 1 and read:  # more slices follow
            emit(Prefilled(active.request_id, active.prefilled, active.prompt_tokens))
    if due:
        take_checkpoints(generator, due, cuts, cache)


def take_checkpoints(
    generator: BatchGenerator, due: list[LmActive], cuts: bool, cache: PromptCache
) -> None:
    """Take the checkpoints the requests ``due`` have just reached; where another
    request waits for that prefix, or it is the end of the system prompt, the cache
    there is stored as an entry."""
    extracted = generator.extract_cache([a.uid for a in due])
    for active in due:
        layers, tokens = extracted.get(active.uid, (None, None))
        mark = active.marks.pop(active.prefilled, None)
        if layers is None or tokens is None or mark is None or len(tokens) != active.prefilled:
            continue
        if not cuts:
            active.checkpoints.append(cp.take(layers, active.prefilled, mark))
        if mark == cp.SYSTEM or active.prefilled in active.wanted:
            cache.store(list(tokens), layers, active.space)
