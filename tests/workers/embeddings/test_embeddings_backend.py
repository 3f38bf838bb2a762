"""The embeddings backend in process, on tiny random BERTs that mlx-embeddings loads:
pooling, batching, limits and the reply sequence, against mlx-embeddings' own results."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx_embeddings import generate

from mlx_gateway.protocol.messages import Done, Embed, Embeddings, Error, Reply, Started
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.embeddings.backend import EmbeddingsBackend
from mlx_gateway.workers.runtime.contract import RequestError

pytestmark = pytest.mark.slow

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The stock market crashed today.",
    "hello",
    "the quick brown fox jumps over the lazy dog, the cat sits on the mat!",
]


class Recorder:
    """The backend's ``emit``: keeps replies, and matrices decoded from their frame."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.matrices: dict[str, np.ndarray] = {}

    def __call__(self, msg: Reply, payloads: Sequence[Any] = ()) -> None:
        self.replies.append(msg)
        if isinstance(msg, Embeddings):
            (frame,) = payloads
            data = np.frombuffer(bytes(frame), dtype="<f4")
            self.matrices[msg.request_id] = data.reshape(msg.rows, msg.dims)

    def of(self, request_id: str) -> list[Reply]:
        return [r for r in self.replies if getattr(r, "request_id", None) == request_id]


class ShapeSpy:
    """Wraps the model to record the (rows, width) of every forward pass."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.shapes: list[tuple[int, int]] = []

    def __call__(self, input_ids: mx.array, **kwargs: Any) -> Any:
        self.shapes.append(tuple(input_ids.shape))  # type: ignore[arg-type]
        return self.model(input_ids, **kwargs)


def make_backend(path: Path, **options: Any) -> tuple[EmbeddingsBackend, Recorder]:
    context_length = options.pop("context_length", None)
    spec = WorkerSpec(
        worker_id="w",
        kind="embeddings",
        model_path=str(path),
        served_model_name="tiny",
        context_length=context_length,
        options=options,
    )
    backend, recorder = EmbeddingsBackend(), Recorder()
    backend.load(spec, recorder)
    return backend, recorder


def run(backend: EmbeddingsBackend) -> None:
    while backend.has_work():
        backend.step()


def reference(backend: EmbeddingsBackend, texts: list[str]) -> np.ndarray:
    """mlx-embeddings' own vectors, one input at a time (no padding at all)."""
    rows = [generate(backend.model, backend.tokenizer, texts=[t]).text_embeds for t in texts]
    return np.concatenate([np.array(r) for r in rows])


@pytest.fixture(scope="module")
def bert(tiny_bert_path: Path) -> tuple[EmbeddingsBackend, Recorder]:
    return make_backend(tiny_bert_path)


def test_facts_and_vectors_match_mlx_embeddings(tiny_bert_path: Path) -> None:
    backend, out = EmbeddingsBackend(), Recorder()
    spec = WorkerSpec(
        worker_id="w", kind="embeddings", model_path=str(tiny_bert_path), served_model_name="t"
    )
    facts = backend.load(spec, out)
    assert facts.context_length == 64  # tokenizer model_max_length = position table
    assert facts.model_type == "bert"
    assert facts.extra["dimensions"] == "32"
    assert facts.extra["pooling"] == "model"

    backend.submit(Embed(request_id="r", texts=SENTENCES), [])
    run(backend)
    started, embeddings, done = out.of("r")
    assert isinstance(started, Started) and isinstance(done, Done)
    assert isinstance(embeddings, Embeddings)
    assert (embeddings.rows, embeddings.dims) == (len(SENTENCES), 32)
    tokens = [len(backend.tokenizer(s)["input_ids"]) for s in SENTENCES]
    assert started.prompt_tokens == done.usage.prompt_tokens == sum(tokens)
    assert done.finish_reason == "stop"
    matrix = out.matrices["r"]
    np.testing.assert_allclose(matrix, reference(backend, SENTENCES), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-5)


def test_cls_pooling_from_sentence_transformers_config(tiny_bert_cls_path: Path) -> None:
    backend, out = make_backend(tiny_bert_cls_path)
    assert backend.info is not None and backend.info.pooling.name == "cls"
    backend.submit(Embed(request_id="r", texts=SENTENCES[:3]), [])
    run(backend)
    for i, text in enumerate(SENTENCES[:3]):
        states = generate(backend.model, backend.tokenizer, texts=[text]).last_hidden_state
        cls = np.array(states[0, 0])
        expected = cls / np.linalg.norm(cls)
        np.testing.assert_allclose(out.matrices["r"][i], expected, atol=1e-5)
    # Not the mean pooling mlx-embeddings would have used for a BERT.
    mean = reference(backend, SENTENCES[:1])[0]
    assert np.abs(out.matrices["r"][0] - mean).max() > 1e-2


def test_batches_respect_max_batch_tokens_and_mix_requests(tiny_bert_path: Path) -> None:
    backend, out = make_backend(tiny_bert_path, max_batch_tokens=40)
    spy = ShapeSpy(backend.model)
    backend.model = spy
    many = [f"{' '.join(['hello'] * (i % 6 + 1))}." for i in range(12)]
    backend.submit(Embed(request_id="a", texts=many), [])
    backend.submit(Embed(request_id="b", texts=SENTENCES[:2]), [])
    backend.submit(Embed(request_id="c", token_ids=[[2, 14, 3]]), [])
    run(backend)
    assert len(spy.shapes) > 2
    assert all(rows * width <= 40 or rows == 1 for rows, width in spy.shapes)
    # Inputs of several requests shared a forward pass.
    assert sum(rows for rows, _ in spy.shapes) == len(many) + 3
    backend.model = spy.model
    np.testing.assert_allclose(out.matrices["a"], reference(backend, many), atol=1e-5)
    np.testing.assert_allclose(out.matrices["b"], reference(backend, SENTENCES[:2]), atol=1e-5)
    assert [type(r).__name__ for r in out.of("c")] == ["Started", "Embeddings", "Done"]


def test_one_input_longer_than_the_batch_budget_still_runs(tiny_bert_path: Path) -> None:
    backend, out = make_backend(tiny_bert_path, max_batch_tokens=4)
    backend.submit(Embed(request_id="r", texts=["the quick brown fox jumps"]), [])
    run(backend)
    assert out.matrices["r"].shape == (1, 32)


def test_too_long_is_rejected_with_its_index(bert: tuple[EmbeddingsBackend, Recorder]) -> None:
    backend, _ = bert
    long_text = "zzzz " * 30  # 4 tokens a word: 120 tokens + 2 specials
    with pytest.raises(RequestError) as info:
        backend.submit(Embed(request_id="long", texts=["ok", "fine", long_text]), [])
    assert info.value.status == 400
    assert info.value.param == "input[2]"
    assert "122 tokens" in info.value.message and "64" in info.value.message
    assert not backend.has_work()


def test_truncate_cuts_to_the_limit_keeping_the_end_token(
    bert: tuple[EmbeddingsBackend, Recorder],
) -> None:
    backend, out = bert
    long_text = "zzzz " * 30
    backend.submit(Embed(request_id="cut", texts=[long_text, "hello"], truncate=True), [])
    backend.submit(Embed(request_id="ids", token_ids=[[2, *[14] * 80, 3]], truncate=True), [])
    run(backend)
    started = out.of("cut")[0]
    assert isinstance(started, Started) and started.prompt_tokens == 64 + 3
    expected = backend.tokenizer(long_text, truncation=True, max_length=64)["input_ids"]
    assert expected[-1] == backend.tokenizer.sep_token_id
    ref = generate(backend.model, backend.tokenizer, texts=[long_text], max_length=64).text_embeds
    np.testing.assert_allclose(out.matrices["cut"][0], np.array(ref)[0], atol=1e-5)
    assert out.matrices["ids"].shape == (1, 32)
    assert out.of("ids")[-1].usage.prompt_tokens == 64  # type: ignore[union-attr]


def test_context_length_from_the_config_lowers_the_limit(tiny_bert_path: Path) -> None:
    backend, _ = make_backend(tiny_bert_path, context_length=8)
    with pytest.raises(RequestError) as info:
        backend.submit(
            Embed(request_id="r", texts=["the quick brown fox jumps over the lazy dog"]), []
        )
    assert info.value.param == "input[0]"


@pytest.mark.parametrize(
    ("request_", "param"),
    [
        (Embed(request_id="x", token_ids=[[2, 5000, 3]]), "input[0]"),
        (Embed(request_id="x", token_ids=[[2, 3], []]), "input[1]"),
        (Embed(request_id="x", texts=["a"], dimensions=33), "dimensions"),
        (Embed(request_id="x", texts=["a"], dimensions=0), "dimensions"),
        (Embed(request_id="x"), "input"),
    ],
)
def test_bad_requests(
    bert: tuple[EmbeddingsBackend, Recorder], request_: Embed, param: str
) -> None:
    backend, _ = bert
    with pytest.raises(RequestError) as info:
        backend.submit(request_, [])
    assert (info.value.status, info.value.param) == (400, param)
    assert not backend.has_work()


def test_dimensions_truncate_and_renormalize(bert: tuple[EmbeddingsBackend, Recorder]) -> None:
    backend, out = bert
    backend.submit(Embed(request_id="full", texts=SENTENCES[:2]), [])
    backend.submit(Embed(request_id="short", texts=SENTENCES[:2], dimensions=8), [])
    run(backend)
    full, short = out.matrices["full"], out.matrices["short"]
    assert short.shape == (2, 8)
    expected = full[:, :8] / np.linalg.norm(full[:, :8], axis=1, keepdims=True)
    np.testing.assert_allclose(short, expected, atol=1e-6)


def test_cancel_ends_with_done_cancelled(bert: tuple[EmbeddingsBackend, Recorder]) -> None:
    backend, out = bert
    backend.submit(Embed(request_id="gone", texts=SENTENCES), [])
    backend.submit(Embed(request_id="kept", texts=SENTENCES[:1]), [])
    backend.cancel("gone")
    backend.cancel("never-seen")
    run(backend)
    replies = out.of("gone")
    assert [type(r).__name__ for r in replies] == ["Started", "Done"]
    assert replies[-1].finish_reason == "cancelled"  # type: ignore[union-attr]
    assert "gone" not in out.matrices and out.matrices["kept"].shape == (1, 32)


def test_failed_step_fails_only_its_requests(tiny_bert_path: Path) -> None:
    backend, out = make_backend(tiny_bert_path, max_batch_tokens=10)
    model = backend.model
    calls = 0

    def flaky(input_ids: mx.array, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        return model(input_ids, **kwargs)

    backend.model = flaky
    backend.submit(Embed(request_id="first", texts=["hello"]), [])
    backend.submit(Embed(request_id="second", texts=["the quick brown fox jumps over"]), [])
    with pytest.raises(RuntimeError):
        backend.step()
    backend.fail_active("generation failed: RuntimeError: boom")
    run(backend)
    error = out.of("first")[-1]
    assert isinstance(error, Error) and error.status == 500
    assert out.matrices["second"].shape == (1, 32)
    assert backend.counts() == (0, 0)


def test_causal_model_padded_batches_equal_each_input_alone(tiny_qwen3_path: Path) -> None:
    # Qwen3-Embedding's tokenizer pads on the left, where mlx-embeddings' fully
    # masked rows turn into NaN; the worker pads on the right.
    backend, out = make_backend(tiny_qwen3_path)
    assert backend.info is not None and backend.info.pooling.name == "lasttoken"
    texts = ["hello", "the quick brown fox jumps over the lazy dog", "cat sits on mat"]
    backend.submit(Embed(request_id="r", texts=texts), [])
    run(backend)
    matrix = out.matrices["r"]
    assert not np.isnan(matrix).any()
    for text, row in zip(texts, matrix, strict=True):
        ids = backend.tokenizer(text)["input_ids"]
        assert ids[-1] == backend.tokenizer.eos_token_id
        alone = np.array(backend.model(mx.array([ids])).last_hidden_state[0, -1])
        np.testing.assert_allclose(row, alone / np.linalg.norm(alone), atol=1e-5)
