"""Rerank: relevance scores of query/document pairs, batched across requests.

Two families of model, told apart by their ``config.json``:

* cross-encoders (``…ForSequenceClassification``: BERT, XLM-RoBERTa, RoBERTa),
  see :mod:`.cross_encoder`;
* LM rerankers (Qwen3-Reranker and its like: a causal LM asked whether the document
  meets the query, the score being its "yes" probability), see :mod:`.lm_reranker`.

:meth:`RerankBackend.submit` turns a request's documents into rows (one per
document, or per window of a long one, see :mod:`.pairs`); the rows of every
request wait in one queue, each request's shortest first, and each
:meth:`RerankBackend.step` takes them in arrival order while the padded batch
stays within ``max_batch_tokens`` (:mod:`..common.length_batches`). So concurrent
requests share forward passes, and cancels and new requests are seen between passes.

Replies per request::

    Started(prompt_tokens)   the documents passed the checks
    Scores(scores)           when its last row is done; a document read in windows
                             scores by its best one
    Done("stop", usage)      usage.prompt_tokens = tokens read (padding aside)

or one ``Error`` (400 before ``Started``; 500 if a forward pass failed).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mlx_gateway.protocol.messages import (
    Detokenize,
    Done,
    ModelFacts,
    Progress,
    Request,
    Rerank,
    Scores,
    Started,
    Tokenize,
    Usage,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.common.length_batches import shortest_first
from mlx_gateway.workers.common.row_batches import RowBatches
from mlx_gateway.workers.common.tokenize import answer_tokenize
from mlx_gateway.workers.rerank.cross_encoder import is_cross_encoder
from mlx_gateway.workers.rerank.pairs import Pair, check_documents
from mlx_gateway.workers.rerank.scorer import Scorer
from mlx_gateway.workers.rerank.scorers import load_scorer
from mlx_gateway.workers.runtime.contract import Emit, LoadError, RequestError
from mlx_gateway.workers.runtime.hub import resolve_model_path

log = logging.getLogger(__name__)

DEFAULT_MAX_BATCH_TOKENS = 8192
"""Padded tokens per forward pass (``max_batch_tokens`` in the model's config)."""
MAX_CHUNKS = 64
"""Most windows a document may be read in."""
ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja"]


@dataclass
class _Job:
    request_id: str
    rows: list[list[Pair]]
    """Per document, its rows."""
    scores: np.ndarray
    """Per document, its best score so far (-inf until one of its rows ran)."""
    remaining: int
    prompt_tokens: int
    running: bool = False
    batch: bool = False
    """Rerank requests carry no priority: always interactive."""


@dataclass
class _Item:
    job: _Job
    document: int
    pair: Pair

    @property
    def length(self) -> int:
        return self.pair.length


@dataclass
class _State:
    scorer: Scorer
    facts: dict[str, str] = field(default_factory=dict)


def create_backend() -> RerankBackend:
    return RerankBackend()


class RerankBackend(RowBatches[_Job, _Item]):
    """The ``rerank`` backend (see the module docstring for the reply sequence)."""

    def __init__(self) -> None:
        super().__init__(DEFAULT_MAX_BATCH_TOKENS)
        self.scorer: Scorer | None = None

    # ------------------------------------------------------------ loading

    def load(self, spec: WorkerSpec, emit: Emit) -> ModelFacts:
        self._emit = emit
        value = spec.options.get("max_batch_tokens", DEFAULT_MAX_BATCH_TOKENS)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise LoadError(f"option max_batch_tokens must be a positive integer, got {value!r}")
        self.max_batch_tokens = value

        def downloading(repo: str) -> None:
            emit(Progress(stage="download", detail=repo))

        path = resolve_model_path(
            spec.model_path, on_download=downloading, allow_patterns=ALLOW_PATTERNS
        )
        emit(Progress(stage="load", detail=str(path)))
        config = _read_json(path / "config.json")
        if not config:
            raise LoadError(f"load failed: {spec.model_path}: no config.json in {path}")
        self.scorer = load_scorer(path, config, spec)
        scorer = self.scorer
        log.info(
            "rerank: %s, window %d tokens, max_batch_tokens %d",
            scorer.family,
            scorer.max_length,
            self.max_batch_tokens,
        )
        return ModelFacts(
            context_length=scorer.max_length,
            model_type=config.get("model_type"),
            extra={
                "reranker": scorer.family,
                "cross_encoder": str(is_cross_encoder(config)).lower(),
                **scorer.facts,
            },
        )

    # ------------------------------------------------------------ requests

    def submit(self, request: Request, payloads: Sequence[bytes]) -> None:
        scorer = self.scorer
        assert scorer is not None
        if isinstance(request, Tokenize | Detokenize):
            self._emit(answer_tokenize(scorer.tokenizer, request))
            self._emit(Done(request_id=request.request_id, finish_reason="stop"))
            return
        if not isinstance(request, Rerank):
            raise RequestError(
                f"a rerank worker does not serve '{type(request).__name__}' requests"
            )
        if request.request_id in self._jobs:
            log.warning("duplicate request_id %s ignored", request.request_id)
            return
        check_documents(request.query, request.documents)
        chunks = request.max_chunks_per_doc
        if not 1 <= chunks <= MAX_CHUNKS:
            raise RequestError(
                f"max_chunks_per_doc must be between 1 and {MAX_CHUNKS}, got {chunks}",
                param="max_chunks_per_doc",
            )
        if request.max_tokens_per_doc is not None and request.max_tokens_per_doc < 1:
            raise RequestError("max_tokens_per_doc must be at least 1", param="max_tokens_per_doc")
        rows = scorer.rows(request)
        flat = [(d, pair) for d, pairs in enumerate(rows) for pair in pairs]
        job = _Job(
            request_id=request.request_id,
            rows=rows,
            scores=np.full(len(rows), -np.inf, dtype=np.float64),
            remaining=len(flat),
            prompt_tokens=sum(pair.length for _, pair in flat),
        )
        self._jobs[job.request_id] = job
        for k in shortest_first([pair.length for _, pair in flat]):
            document, pair = flat[k]
            self._queue.append(_Item(job, document, pair))
        self._emit(Started(request_id=job.request_id, prompt_tokens=job.prompt_tokens))

    def counts(self) -> tuple[int, int]:
        running = sum(1 for job in list(self._jobs.values()) if job.running)
        return running, len(self._jobs) - running

    # ------------------------------------------------------------ batches

    def step(self) -> None:
        batch = self._take()
        if not batch:
            return
        scorer = self.scorer
        assert scorer is not None
        scores = scorer.score([item.pair for item in batch])
        for item, score in zip(batch, scores, strict=True):
            job = item.job
            job.running = True
            job.scores[item.document] = max(job.scores[item.document], float(score))
            job.remaining -= 1
        for job in self._finished():
            self._emit(Scores(request_id=job.request_id, scores=job.scores.tolist()))
            self._emit(Done(request_id=job.request_id, finish_reason="stop", usage=_usage(job)))


def _usage(job: _Job) -> Usage:
    return Usage(prompt_tokens=job.prompt_tokens)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
