"""A 10 MiB prompt is refused before it is tokenized whole: real workers (a tiny
llama, a tiny Qwen2-VL, a tiny BERT) over real ZeroMQ, for chats, token counts and
embeddings. The refusal comes first and fast, and the small request sent right
behind it to the same worker is answered after it. A 10 MiB rerank document is cut
(never refused): only what its rows read is tokenized, and it scores as before.

Without the cheap bound (``workers/common/token_bound.py``) the worker spends
its one MLX thread tokenizing the whole text (12-23 s for these tokenizers on a
loaded machine) before the same 400 (or the same scores), and the small request
waits behind it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from mlx_gateway.protocol.messages import CountTokens, Done, Embed, Error, Ready, Rerank, Scores
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


def test_a_huge_token_count_is_refused_at_once(tiny_lm_path: Path, tmp_path: Path) -> None:
    """A count (Anthropic's count_tokens, the context-overflow policy) of a prompt
    that surely cannot fit is the same context error, not 15 s of tokenizing."""
    worker = WorkerHarness(tmp_path, tiny_lm_path)
    try:
        worker.wait_other(Ready)
        huge = [{"role": "user", "content": HUGE}]
        sent = time.monotonic()
        worker.send(CountTokens(request_id="huge", messages=huge))
        worker.send(CountTokens(request_id="huge-prompt", prompt=HUGE))
        (refusal,) = worker.finished("huge", timeout=120)
        (raw,) = worker.finished("huge-prompt", timeout=120)
        took = time.monotonic() - sent
        assert isinstance(refusal, Error) and isinstance(raw, Error), (refusal, raw)
        assert refusal.code == raw.code == "context_length_exceeded"
        assert (refusal.param, raw.param) == ("messages", "prompt")
        assert "at least" in refusal.message
        assert took < BOUND, took
        small = [{"role": "user", "content": "hello"}]
        worker.send(CountTokens(request_id="small", messages=small))
        (counted,) = worker.finished("small", timeout=60)
        assert isinstance(counted, Done) and counted.usage.prompt_tokens > 0
    finally:
        worker.close()


def test_a_huge_vision_prompt_is_refused_at_once(tiny_vlm_path: Path, tmp_path: Path) -> None:
    """The vlm worker: a 10 MiB chat and its count are refused before the processor
    tokenizes them; a small chat behind them is answered."""
    worker = WorkerHarness(tmp_path, tiny_vlm_path, kind="vlm")
    try:
        worker.wait_other(Ready)
        sent = time.monotonic()
        worker.generate("huge", content=HUGE, max_tokens=4)
        worker.send(CountTokens(request_id="count", messages=[{"role": "user", "content": HUGE}]))
        worker.generate("small", content="hello", max_tokens=3)
        (refusal,) = worker.finished("huge", timeout=120)
        (count,) = worker.finished("count", timeout=120)
        took = time.monotonic() - sent
        for error in (refusal, count):
            assert isinstance(error, Error), error
            assert error.code == "context_length_exceeded" and error.param == "messages"
            assert "at least" in error.message and "characters" in error.message
        assert refusal.overflow is not None and refusal.overflow.limit == 1024
        assert took < BOUND, took
        assert isinstance(worker.finished("small", timeout=60)[-1], Done)
    finally:
        worker.close()


@pytest.mark.parametrize("family", ["cross-encoder", "lm"])
def test_a_huge_rerank_document_is_read_only_as_far_as_its_rows_go(
    family: str, tiny_cross_encoder_path: Path, tiny_lm_reranker_path: Path, tmp_path: Path
) -> None:
    """Rerank cuts a long document (or reads it in windows), never refuses it: a
    10 MiB document (and query) scores as its first 100,000 characters do, at once,
    with one window or four."""
    path = tiny_cross_encoder_path if family == "cross-encoder" else tiny_lm_reranker_path
    # a short window for the LM reranker: its forward passes on CPU stay short
    worker = WorkerHarness(tmp_path, path, kind="rerank", context_length=256)
    cut = HUGE[:100_000]
    try:
        worker.wait_other(Ready)
        sent = time.monotonic()
        for chunks in (1, 4):
            for name, text in (("huge", HUGE), ("cut", cut)):
                docs = ["the cat sits", text]
                worker.send(
                    Rerank(
                        request_id=f"{name}-{chunks}",
                        query=text if chunks == 1 else "cat",
                        documents=docs,
                        max_chunks_per_doc=chunks,
                    )
                )
        replies = {
            f"{name}-{chunks}": worker.finished(f"{name}-{chunks}", timeout=120)
            for chunks in (1, 4)
            for name in ("huge", "cut")
        }
        took = time.monotonic() - sent
        assert took < BOUND, took
        for chunks in (1, 4):
            huge, cut_ = replies[f"huge-{chunks}"], replies[f"cut-{chunks}"]
            assert isinstance(huge[-1], Done) and isinstance(cut_[-1], Done), (huge, cut_)
            assert huge[-1].usage.prompt_tokens == cut_[-1].usage.prompt_tokens
            (scores,) = [r for r in huge if isinstance(r, Scores)]
            (expected,) = [r for r in cut_ if isinstance(r, Scores)]
            assert scores.scores == pytest.approx(expected.scores, abs=1e-6)
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


def test_a_prefix_keeps_the_tokens_asked_for(tiny_lm_path: Path) -> None:
    """``prefix(text, n)``: the first n tokens of the cut text are the whole text's,
    for words, one long word and whitespace runs; a short text stays whole."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_lm_path))
    bound = TokenBound.of(tokenizer)
    for text in ("word and more " * 20_000, "a" * 200_000, ("x" + " " * 50) * 20_000):
        for n in (1, 100, 700):
            cut = bound.prefix(text, n)
            assert len(cut) < len(text)
            whole = tokenizer.encode(text, add_special_tokens=False)[:n]
            assert tokenizer.encode(cut, add_special_tokens=False)[:n] == whole
    assert bound.prefix("short text", 10) == "short text"
