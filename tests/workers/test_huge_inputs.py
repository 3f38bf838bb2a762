"""A 10 MiB prompt is refused before it is tokenized whole: real workers (a tiny
llama, a tiny BERT) over real ZeroMQ. The refusal comes first and fast, and the small
request sent right behind it to the same worker is answered after it.

Without the cheap bound (``workers/common/token_bound.py``) the lm worker spends
its one MLX thread tokenizing the whole text (12-15 s for a real model's tokenizer)
before the same 400, and the small request waits behind it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mlx_gateway.protocol.messages import Done, Embed, Error, Ready
from mlx_gateway.workers.common.token_bound import TokenBound

from .harness import WorkerHarness

pytestmark = pytest.mark.slow

HUGE = ("lorem ipsum dolor sit amet " * 400_000)[: 10 * 1024 * 1024]  # 10 MiB
BOUND = 5.0
"""Seconds the refusal may take at most (well under one on an idle machine; slack
for a loaded one). Tokenizing the text whole takes longer than this."""


def test_a_huge_chat_prompt_is_refused_at_once(tiny_lm_path: Path, tmp_path: Path) -> None:
    worker = WorkerHarness(tmp_path, tiny_lm_path)
    try:
        worker.wait_other(Ready)
        sent = time.monotonic()
        worker.generate("huge", content=HUGE, max_tokens=4)
        worker.generate("small", content="hello", max_tokens=3)
        (refusal,) = worker.finished("huge", timeout=120)
        took = time.monotonic() - sent
        assert isinstance(refusal, Error), refusal
        assert refusal.code == "context_length_exceeded" and refusal.param == "messages"
        assert "at least" in refusal.message and "characters" in refusal.message
        assert refusal.overflow is not None and refusal.overflow.prompt_tokens >= 2048
        assert took < BOUND, took
        small = worker.finished("small", timeout=60)
        assert isinstance(small[-1], Done), small
        # and a prompt that fits still runs whatever the bound says of it
        worker.generate("fits", content="lorem ipsum " * 50, max_tokens=2)
        assert isinstance(worker.finished("fits", timeout=60)[-1], Done)
    finally:
        worker.close()


def test_a_huge_embedding_input_is_refused_at_once(tiny_bert_path: Path, tmp_path: Path) -> None:
    worker = WorkerHarness(tmp_path, tiny_bert_path, kind="embeddings")
    try:
        worker.wait_other(Ready)
        sent = time.monotonic()
        worker.send(Embed(request_id="huge", texts=["short", HUGE], truncate=False))
        worker.send(Embed(request_id="small", texts=["hello"]))
        (refusal,) = worker.finished("huge", timeout=120)
        took = time.monotonic() - sent
        assert isinstance(refusal, Error), refusal
        assert refusal.code == "context_length_exceeded" and refusal.param == "input[1]"
        assert "at least" in refusal.message
        assert took < BOUND, took
        assert isinstance(worker.finished("small", timeout=60)[-1], Done)
    finally:
        worker.close()


def test_the_bound_never_exceeds_the_real_count(tiny_lm_path: Path) -> None:
    """Whitespace runs, long words, one long token repeated: the bound stays at or
    under what the tokenizer counts."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_lm_path))
    bound = TokenBound.of(tokenizer)
    assert bound.longest
    longest = max(tokenizer.get_vocab(), key=len)
    for text in (
        " " * 100_000 + "x",
        "a" * 50_000,
        "word " * 20_000,
        tokenizer.convert_tokens_to_string([longest]) * 5_000,
        "\u00e9t\u00e9 " * 10_000,
    ):
        assert bound.at_least([text]) <= len(tokenizer.encode(text, add_special_tokens=False))
