"""The limit: mlx-lm generating in this very process, no server in between.

Measured the way the HTTP runs are (see :mod:`.client`): ``streams`` sequences in
flight, each slot taking its next prompt as soon as its previous one finished,
greedy, every request generating exactly ``max_tokens`` tokens (the benchmark's
model never emits EOS).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from mlx_lm import stream_generate
from mlx_lm.generate import BatchGenerator
from mlx_lm.sample_utils import make_sampler

from .client import Result, Run

Prompt = Callable[[int], list[int]]


def stream_generate_run(
    model: Any, tokenizer: Any, prompt_for: Prompt, requests: int, max_tokens: int
) -> Run:
    """One stream: ``requests`` calls of ``mlx_lm.stream_generate`` in a row."""
    sampler = make_sampler(temp=0.0)
    run = Run(streams=1)
    started = time.perf_counter()
    for i in range(requests):
        result = Result(start=time.perf_counter())
        for response in stream_generate(
            model, tokenizer, prompt_for(i), max_tokens=max_tokens, sampler=sampler
        ):
            if result.first_token is None:
                result.first_token = time.perf_counter()
            result.tokens = response.generation_tokens
        result.end = time.perf_counter()
        run.results.append(result)
    run.wall = time.perf_counter() - started
    return run


def batch_generator_run(
    model: Any,
    prompt_for: Prompt,
    streams: int,
    requests_per_stream: int,
    max_tokens: int,
    prefill_batch_size: int,
    stop_tokens: list[list[int]] | None = None,
    max_tokens_for: Callable[[int], int] | None = None,
) -> Run:
    """``streams`` slots of one ``BatchGenerator`` (completion batch = ``streams``),
    each refilled with a new prompt as soon as its sequence finished (at
    ``max_tokens``, or ``max_tokens_for(i)`` for the ``i``-th request, or at one of
    ``stop_tokens``: a real model's end of turn)."""
    generator = BatchGenerator(
        model,
        completion_batch_size=streams,
        prefill_batch_size=min(prefill_batch_size, streams),
        sampler=make_sampler(temp=0.0),
        stop_tokens=stop_tokens,
    )
    run = Run(streams)
    total = streams * requests_per_stream
    live: dict[int, Result] = {}
    sent = 0

    budget = max_tokens_for or (lambda i: max_tokens)

    def insert(n: int) -> None:
        nonlocal sent
        uids = generator.insert(
            [prompt_for(sent + k) for k in range(n)],
            max_tokens=[budget(sent + k) for k in range(n)],
        )
        now = time.perf_counter()
        for uid in uids:
            live[uid] = Result(start=now)
        sent += n

    started = time.perf_counter()
    insert(streams)
    while live:
        _, responses = generator.next()
        now = time.perf_counter()
        finished = 0
        for response in responses:
            result = live[response.uid]
            if result.first_token is None:
                result.first_token = now
            result.tokens += 1
            if response.finish_reason is not None:
                result.end = now
                run.results.append(live.pop(response.uid))
                finished += 1
        if finished and sent < total:
            insert(min(finished, total - sent))
    run.wall = time.perf_counter() - started
    generator.close()
    return run


def prefill_seconds(model: Any, tokenizer: Any, prompt: list[int]) -> float:
    """Time to the first token of one prompt with ``stream_generate`` (no cache)."""
    started = time.perf_counter()
    for _ in stream_generate(model, tokenizer, prompt, max_tokens=1):
        break
    return time.perf_counter() - started
