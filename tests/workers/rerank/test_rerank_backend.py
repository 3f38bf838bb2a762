"""The rerank backend in process, on the tiny random BERT cross-encoder: the rows of
concurrent requests share forward passes (padded within max_batch_tokens), the reply
sequence, cancels, and tokenizing with the model's tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlx_gateway.protocol.messages import (
    Detokenize,
    Done,
    Reply,
    Rerank,
    Scores,
    Started,
    Tokenize,
    Tokens,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.rerank.backend import RerankBackend
from mlx_gateway.workers.runtime.contract import RequestError
from tests.fixtures.tiny_cross_encoder import reference_scores

pytestmark = pytest.mark.slow

DOCS = ["the stock market crashed today", "a man is eating food", "hello", "the cat sits"]


class ShapeSpy:
    def __init__(self, model: Any) -> None:
        self.model = model
        self.shapes: list[tuple[int, int]] = []

    def __call__(self, ids: Any, mask: Any, types: Any) -> Any:
        self.shapes.append(tuple(ids.shape))
        return self.model(ids, mask, types)


def loaded(path: Path, **options: Any) -> tuple[RerankBackend, list[Reply], ShapeSpy]:
    replies: list[Reply] = []
    backend = RerankBackend()
    spec = WorkerSpec(
        worker_id="w", kind="rerank", model_path=str(path), served_model_name="ce", options=options
    )
    backend.load(spec, lambda msg, payloads=(): replies.append(msg))
    scorer: Any = backend.scorer
    spy = ShapeSpy(scorer.model)
    scorer.model = spy
    return backend, replies, spy


def of(replies: list[Reply], request_id: str) -> list[Reply]:
    return [r for r in replies if getattr(r, "request_id", None) == request_id]


def test_concurrent_requests_share_one_forward_pass(tiny_cross_encoder_path: Path) -> None:
    backend, replies, spy = loaded(tiny_cross_encoder_path, max_batch_tokens=4096)
    backend.submit(Rerank(request_id="a", query="a man", documents=DOCS), [])
    backend.submit(Rerank(request_id="b", query="the cat", documents=DOCS[:2]), [])
    assert backend.counts() == (0, 2)
    backend.step()
    assert spy.shapes[0][0] == 6  # every row of both requests in one pass
    assert not backend.has_work()
    for rid, n in (("a", 4), ("b", 2)):
        started, scores, done = of(replies, rid)
        assert isinstance(started, Started) and isinstance(done, Done)
        assert isinstance(scores, Scores) and len(scores.scores) == n
        assert done.usage.prompt_tokens == started.prompt_tokens > 0
    # padding does not change a score: the same pairs alone, one per pass
    alone, alone_replies, _ = loaded(tiny_cross_encoder_path, max_batch_tokens=1)
    alone.submit(Rerank(request_id="a", query="a man", documents=DOCS), [])
    while alone.has_work():
        alone.step()
    (single,) = [r for r in alone_replies if isinstance(r, Scores)]
    batched = next(r for r in replies if isinstance(r, Scores) and r.request_id == "a")
    np.testing.assert_allclose(batched.scores, single.scores, atol=1e-6)


def test_max_batch_tokens_splits_passes_shortest_first(tiny_cross_encoder_path: Path) -> None:
    backend, replies, spy = loaded(tiny_cross_encoder_path, max_batch_tokens=24)
    backend.submit(Rerank(request_id="a", query="a man", documents=DOCS), [])
    while backend.has_work():
        backend.step()
    assert len(spy.shapes) > 1
    assert all(rows * width <= 24 or rows == 1 for rows, width in spy.shapes)
    widths = [width for _, width in spy.shapes]
    assert widths == sorted(widths)
    (scores,) = [r for r in replies if isinstance(r, Scores)]
    rows = backend.scorer.rows(Rerank(request_id="x", query="a man", documents=DOCS))  # type: ignore[union-attr]
    want = reference_scores(tiny_cross_encoder_path, [(r[0].ids, r[0].type_ids) for r in rows])
    np.testing.assert_allclose(scores.scores, want, atol=2e-5)


def test_cancel_ends_a_queued_request(tiny_cross_encoder_path: Path) -> None:
    backend, replies, _ = loaded(tiny_cross_encoder_path)
    backend.submit(Rerank(request_id="a", query="a man", documents=DOCS), [])
    backend.cancel("a")
    assert not backend.has_work()
    backend.step()
    assert [type(r) for r in of(replies, "a")] == [Started, Done]
    assert of(replies, "a")[-1].finish_reason == "cancelled"  # type: ignore[union-attr]


def test_bad_requests_are_request_errors(tiny_cross_encoder_path: Path) -> None:
    backend, _, _ = loaded(tiny_cross_encoder_path)
    for request, param in [
        (Rerank(request_id="a", query="", documents=DOCS), "query"),
        (Rerank(request_id="a", query="x", documents=[]), "documents"),
        (Rerank(request_id="a", query="x", documents=["a", ""]), "documents[1]"),
        (Rerank(request_id="a", query="x", documents=DOCS, max_chunks_per_doc=0), "max_chunks"),
    ]:
        with pytest.raises(RequestError) as err:
            backend.submit(request, [])
        assert (err.value.param or "").startswith(param)
    assert not backend.has_work()


def test_tokenize_and_detokenize_with_the_model_tokenizer(tiny_cross_encoder_path: Path) -> None:
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(tiny_cross_encoder_path))
    backend, replies, _ = loaded(tiny_cross_encoder_path)
    text = "the cat sits on the mat"
    backend.submit(Tokenize(request_id="t", text=text, add_special=True, with_pieces=True), [])
    tokens, done = of(replies, "t")
    assert isinstance(tokens, Tokens) and isinstance(done, Done)
    assert tokens.tokens == hf(text)["input_ids"]
    assert len(tokens.pieces) == len(tokens.tokens)
    assert "".join(tokens.pieces[1:-1]).strip() == text
    backend.submit(
        Detokenize(request_id="d", tokens=hf(text, add_special_tokens=False)["input_ids"]), []
    )
    assert of(replies, "d")[0].text == text  # type: ignore[union-attr]
    with pytest.raises(RequestError):
        backend.submit(Detokenize(request_id="e", tokens=[10**6]), [])


def test_lm_reranker_scores_a_long_document_by_its_best_window(
    tiny_lm_reranker_path: Path,
) -> None:
    from tests.fixtures.tiny_lm_reranker import reference_yes_probability

    backend, replies, _ = loaded_lm(tiny_lm_reranker_path)
    doc = "count the steps and stop when done! " * 30 + "hello world"
    request = Rerank(request_id="a", query="hello", documents=[doc], max_chunks_per_doc=16)
    backend.submit(request, [])
    while backend.has_work():
        backend.step()
    (scores,) = [r for r in replies if isinstance(r, Scores)]
    scorer: Any = backend.scorer
    (rows,) = scorer.rows(request)
    assert len(rows) >= 2
    for row in rows:
        text = scorer.tokenizer.decode(row.ids)
        assert text.startswith("<|im_start|>system\nJudge whether the Document")
        assert "<Query>: hello\n<Document>: " in text
        assert len(row.ids) > 200  # a real window, not a token or two
        assert text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        assert len(row.ids) <= 320
    assert "hello world" in scorer.tokenizer.decode(rows[-1].ids)  # the end is read too
    want = [reference_yes_probability(tiny_lm_reranker_path, row.ids) for row in rows]
    assert scores.scores[0] == pytest.approx(max(want), abs=2e-5)


def loaded_lm(path: Path) -> tuple[RerankBackend, list[Reply], None]:
    replies: list[Reply] = []
    backend = RerankBackend()
    spec = WorkerSpec(
        worker_id="w",
        kind="rerank",
        model_path=str(path),
        served_model_name="lm",
        context_length=320,
    )
    backend.load(spec, lambda msg, payloads=(): replies.append(msg))
    return backend, replies, None


def test_xlm_roberta_cross_encoder(tiny_xlmr_cross_encoder_path: Path) -> None:
    """bge-reranker-v2-m3's layout: RoBERTa's pair template, one token type, the
    dense + out_proj head on the first token, positions after the padding index;
    batched (padded) scores equal the NumPy ones of each pair alone."""
    from transformers import AutoTokenizer

    path = tiny_xlmr_cross_encoder_path
    hf = AutoTokenizer.from_pretrained(str(path))
    replies: list[Reply] = []
    backend = RerankBackend()
    spec = WorkerSpec(worker_id="w", kind="rerank", model_path=str(path), served_model_name="x")
    facts = backend.load(spec, lambda msg, payloads=(): replies.append(msg))
    assert facts.context_length == 64 and facts.extra["activation"] == "sigmoid"
    query = "a man is eating"
    docs = [*DOCS, "the quick brown fox jumps over the lazy dog " * 10]
    backend.submit(Rerank(request_id="a", query=query, documents=docs), [])
    while backend.has_work():
        backend.step()
    (scores,) = [r for r in replies if isinstance(r, Scores)]
    pairs = [hf(query, d, truncation="only_second", max_length=64)["input_ids"] for d in docs]
    assert pairs[0][:2] == [0, hf.convert_tokens_to_ids("a")] and pairs[0][-1] == 2
    assert len(pairs[-1]) == 64
    want = reference_scores(path, [(ids, [0] * len(ids)) for ids in pairs])
    np.testing.assert_allclose(scores.scores, want, atol=2e-5)


def test_a_quantized_cross_encoder_loads(tiny_cross_encoder_path: Path, tmp_path: Path) -> None:
    """An MLX conversion with ``quantization`` in its config: the layers saved with
    ``scales`` are quantized before the weights load, and score as the quantized model
    they were saved from (not as the float one)."""
    import json
    import shutil

    import mlx.core as mx
    import mlx.nn as nn
    from mlx.utils import tree_flatten

    from mlx_gateway.workers.rerank.cross_encoder import load_cross_encoder

    out = tmp_path / "q4"
    shutil.copytree(tiny_cross_encoder_path, out)
    config = json.loads((out / "config.json").read_text())
    model, _ = load_cross_encoder(out, config)
    float_model, _ = load_cross_encoder(out, config)
    nn.quantize(model, group_size=32, bits=4)
    saved = {
        f"bert.{k.removeprefix('encoder.')}" if k.startswith("encoder.") else k: v
        for k, v in tree_flatten(model.parameters())
    }
    assert any(k.endswith(".scales") for k in saved)
    mx.save_safetensors(str(out / "model.safetensors"), saved)
    config["quantization"] = {"group_size": 32, "bits": 4}
    (out / "config.json").write_text(json.dumps(config))

    backend, replies, _ = loaded(out)
    request = Rerank(request_id="q", query="a man", documents=DOCS)
    backend.submit(request, [])
    while backend.has_work():
        backend.step()
    (scores,) = [r for r in replies if isinstance(r, Scores)]
    rows = [r[0] for r in backend.scorer.rows(request)]  # type: ignore[union-attr]

    def alone(m: Any) -> list[float]:
        return [
            float(
                mx.sigmoid(m(mx.array([p.ids]), mx.ones((1, p.length)), mx.array([p.type_ids])))[
                    0, 0
                ]
            )
            for p in rows
        ]

    np.testing.assert_allclose(scores.scores, alone(model), atol=2e-5)
    assert np.abs(np.array(scores.scores) - alone(float_model)).max() > 1e-4
