"""The workload of ``bench.lm`` (and of the benchmarks that reuse it): the tiny llama
that never stops early, the prompts, and each request's ``max_tokens``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

SENTENCES = [
    "hello world, this is a tiny test corpus.",
    "The quick brown fox jumps over the lazy dog.",
    "Models stream tokens; the gateway relays them to every client.",
    "One, two, three: count the steps and stop when done!",
]
SERVED_NAME = "tiny"


def build_model(out: Path) -> Path:
    """The tests' tiny llama (its default size and seed), with the EOS row of its
    output layer zeroed (:func:`.speculative.build`): greedy decoding never stops
    before ``max_tokens`` and every setup generates the same number of tokens."""
    from .speculative import build

    return build(out, hidden=64, layers=2, inert=0, seed=0)


def messages_for(i: int, story: bool = False) -> list[dict[str, str]]:
    """The ``i``-th prompt; ``story`` (a real model, ``--model``): one that asks for an
    answer that runs to ``--max-tokens``."""
    sentence = SENTENCES[i % len(SENTENCES)]
    if story:
        return [{"role": "user", "content": f"Tell a long story ({i}) that begins: {sentence}"}]
    return [{"role": "user", "content": f"Request {i}: {sentence}"}]


def long_message(tokenizer: Any, index: int, tokens: int) -> str:
    """A user message of about ``tokens`` tokens (after the chat template)."""
    words = " ".join(SENTENCES).split()
    text = f"Conversation {index}:"
    step = 0
    while True:
        chunk = " ".join(f"{words[(step + k) % len(words)]}" for k in range(40))
        candidate = f"{text} {chunk} ({step})"
        count = len(tokenizer.apply_chat_template([{"role": "user", "content": candidate}]))
        if count > tokens:
            return text
        text, step = candidate, step + 40


def tokens_for(args: argparse.Namespace, i: int, streams: int) -> int:
    """The ``i``-th request's ``max_tokens`` in a run of ``streams`` streams: spread
    by ``--vary-tokens`` at several streams, ``--max-tokens`` at one."""
    if not args.vary_tokens or streams == 1:
        return int(args.max_tokens)
    spread = ((i * 2654435761) % 2**32) / 2**32 * 2 - 1  # evenly over [-1, 1)
    return max(1, round(args.max_tokens * (1 + args.vary_tokens * spread)))
