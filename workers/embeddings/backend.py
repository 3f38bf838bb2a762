"""Text embeddings with mlx-embeddings, batched across requests.

:meth:`EmbeddingsBackend.submit` tokenizes a request's inputs and checks them
against the model's maximum length (over it: a 400 naming ``input[i]``, or the
input is cut to the limit when the request says ``truncate``). Its inputs then
wait in one queue shared by every request, shortest first within a request (less
padding). Each :meth:`EmbeddingsBackend.step` takes inputs from the queue in
arrival order while the padded batch stays within ``max_batch_tokens``, runs one
forward pass and pools (see :mod:`.pooling`), so concurrent requests and long
input lists share forward passes, and cancels and new requests are seen between
passes. A batch always holds at least one input, however long.

Replies per request::

    Started(prompt_tokens)           the inputs passed the checks
    Embeddings(rows, dims) + frame   when its last input is done: one C-order
                                     little-endian float32 matrix, rows in input order
    Done("stop", usage)              usage.prompt_tokens = tokens embedded

or one ``Error`` (400 before ``Started``; 500 if a forward pass failed). A
cancelled request ends with ``Done("cancelled")`` and no ``Embeddings``.
With ``dimensions`` the vectors are cut to that many leading components and
L2-normalized again (Matryoshka-style shortening).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
import numpy as np

from mlx_gateway.protocol.messages import (
    BATCH,
    Detokenize,
    Done,
    Embed,
    Embeddings,
    ModelFacts,
    Progress,
    Request,
    Started,
    Tokenize,
    Usage,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.common.encoder_limits import max_input_length, read_json
from mlx_gateway.workers.common.length_batches import pad_right, shortest_first
from mlx_gateway.workers.common.row_batches import RowBatches
from mlx_gateway.workers.common.token_bound import TokenBound
from mlx_gateway.workers.common.tokenize import answer_tokenize
from mlx_gateway.workers.embeddings.images import ImageInputs, read_images
from mlx_gateway.workers.embeddings.multivector import (
    MULTI_VECTOR_TYPES,
    MultiVector,
    load_multivector,
)
from mlx_gateway.workers.embeddings.pooling import (
    MODEL_POOLING,
    Pooling,
    can_pool_states,
    pool,
    read_pooling,
)
from mlx_gateway.workers.embeddings.vision import DualEncoder, load_embedder
from mlx_gateway.workers.runtime.contract import Emit, LoadError, RequestError
from mlx_gateway.workers.runtime.hub import resolve_model_path

log = logging.getLogger(__name__)

DEFAULT_MAX_BATCH_TOKENS = 4096
"""Padded tokens per forward pass (``max_batch_tokens`` in the model's config)."""
ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken"]
"""What a hub download fetches: weights, configs (1_Pooling/config.json too), vocabularies."""


@dataclass
class _Job:
    """One accepted request: its inputs' tokens and the vectors done so far."""

    request_id: str
    tokens: list[list[int]]
    """Each input's token ids (empty for an image input)."""
    dimensions: int | None
    vectors: np.ndarray | None = None
    """(inputs, model dims) float32, allocated with the first batch."""
    token_vectors: dict[int, np.ndarray] = field(default_factory=dict)
    """A multi-vector model's: each input's (tokens, dims) vectors."""
    remaining: int = 0
    prompt_tokens: int = 0
    batch: bool = False


@dataclass
class _Item:
    """One input of a job, waiting for a batch."""

    job: _Job
    index: int
    length: int
    """Its width in a batch: its tokens, a dual encoder's text width, or an image's patches."""
    pixels: Any = None
    """An image input: what the model's processor made of it."""


@dataclass
class _Model:
    """What :meth:`EmbeddingsBackend.load` learned about the model."""

    max_length: int
    dims: int
    vocab_size: int
    pad_id: int
    pooling: Pooling
    facts: dict[str, str] = field(default_factory=dict)


def create_backend() -> EmbeddingsBackend:
    return EmbeddingsBackend()


class EmbeddingsBackend(RowBatches[_Job, _Item]):
    """The ``embeddings`` backend (see the module docstring for the reply sequence)."""

    def __init__(self) -> None:
        super().__init__(DEFAULT_MAX_BATCH_TOKENS)
        self.model: Any = None
        self.tokenizer: Any = None
        self.info: _Model | None = None
        self.dual: DualEncoder | None = None
        """Set for a model that embeds images too (see :mod:`.vision`)."""
        self.multi: MultiVector | None = None
        """Set for a multi-vector model (see :mod:`.multivector`)."""
        self.name = ""
        self.token_bound = TokenBound(None)
        """Refuses an input that cannot fit before it is tokenized (truncate false)."""

    # ------------------------------------------------------------ loading

    def load(self, spec: WorkerSpec, emit: Emit) -> ModelFacts:
        self._emit = emit
        self.name = spec.served_model_name
        self.max_batch_tokens = _positive_option(spec, "max_batch_tokens", DEFAULT_MAX_BATCH_TOKENS)

        def downloading(repo: str) -> None:
            emit(Progress(stage="download", detail=repo))

        path = resolve_model_path(
            spec.model_path, on_download=downloading, allow_patterns=ALLOW_PATTERNS
        )
        emit(Progress(stage="load", detail=str(path)))
        config = read_json(path / "config.json")
        try:
            if config.get("model_type") in MULTI_VECTOR_TYPES:
                model, tokenizer = load_multivector(path)
            else:
                model, tokenizer = load_embedder(path, config)
        except ValueError as exc:  # "Model type … not supported", tokenizer failures
            raise LoadError(f"load failed: {spec.model_path}: {exc}") from None
        self.model = model
        self.tokenizer = _hf_tokenizer(tokenizer)
        self.token_bound = TokenBound.of(self.tokenizer)
        limit = max_input_length(path, config, self.tokenizer, spec.context_length)
        self.dual = DualEncoder.of(model, tokenizer, limit)
        self.multi = MultiVector.of(model, tokenizer) if self.dual is None else None
        self.info = self._describe(path, config, spec)
        info = self.info
        images = self.dual is not None or self.multi is not None
        inputs = "text,image" if images else "text"
        return ModelFacts(
            context_length=info.max_length,
            model_type=config.get("model_type"),
            extra={
                "dimensions": str(info.dims),
                "pooling": info.pooling.name,
                "inputs": inputs,
                "vectors": "multi" if self.multi is not None else "one",
                **info.facts,
            },
        )

    def _describe(self, path: Path, config: dict[str, Any], spec: WorkerSpec) -> _Model:
        tokenizer = self.tokenizer
        pad_id = tokenizer.pad_token_id
        if pad_id is None:
            pad_id = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else 0
        own_vectors = self.dual is not None or self.multi is not None
        pooling = Pooling() if own_vectors else read_pooling(path)
        info = _Model(
            max_length=max_input_length(path, config, tokenizer, spec.context_length),
            dims=0,
            vocab_size=_vocab_size(config, tokenizer),
            pad_id=int(pad_id),
            pooling=pooling,
        )
        self.info = info
        # One pass on a short input: finds the vector size (Dense layers may change
        # it) and pays the first-call costs before Ready rather than on a request.
        # A dual encoder's probe runs its text tower alone (its __call__ wants an image).
        probe = [tokenizer("hello", add_special_tokens=True)["input_ids"]]
        if self.multi is not None:
            vectors = mx.array(self.multi.text_rows(probe, info.pad_id)[0])
        elif self.dual is not None:
            vectors = self.dual.text_vectors(probe, info.pad_id)
        else:
            output, mask, lengths = self._forward(probe)
            if pooling.modes != (MODEL_POOLING,) and not can_pool_states(output):
                log.info("the model returns no token states: using its own pooling")
                info.pooling = Pooling()
            vectors = pool(info.pooling, output, mask, lengths)
        mx.eval(vectors)
        info.dims = int(vectors.shape[-1])
        info.facts = {"normalized": str(info.pooling.normalize).lower()}
        log.info(
            "embeddings: %d dims, %s%s%s, max length %d, max_batch_tokens %d",
            info.dims,
            "texts and images" if self.dual is not None else "texts",
            f", pooling {info.pooling.name}" if self.dual is None else "",
            " + L2 normalization" if info.pooling.normalize else "",
            info.max_length,
            self.max_batch_tokens,
        )
        return info

    # ------------------------------------------------------------ requests

    def submit(self, request: Request, payloads: Sequence[bytes]) -> None:
        if isinstance(request, Tokenize | Detokenize):
            self._emit(answer_tokenize(self.tokenizer, request))
            self._emit(Done(request_id=request.request_id, finish_reason="stop"))
            return
        if not isinstance(request, Embed):
            raise RequestError(
                f"an embeddings worker does not serve '{type(request).__name__}' requests"
            )
        if request.request_id in self._jobs:
            log.warning("duplicate request_id %s ignored", request.request_id)
            return
        info = self.info
        assert info is not None
        dimensions = request.dimensions
        if dimensions is not None and self.multi is not None:
            raise RequestError(
                "dimensions is not supported by a multi-vector model", param="dimensions"
            )
        if dimensions is not None and not 1 <= dimensions <= info.dims:
            raise RequestError(
                f"dimensions must be between 1 and {info.dims} for this model, got {dimensions}",
                param="dimensions",
            )
        images = read_images(request, payloads, self.dual or self.multi, self.name)
        texts = self._tokens(request) if request.texts or request.token_ids else []
        if not texts and not images.pixels:
            raise RequestError("the input is empty", param="input")
        tokens = images.merge(texts)
        job = _Job(request.request_id, tokens, dimensions, remaining=len(tokens))
        job.prompt_tokens = sum(len(t) for t in texts) + images.tokens
        job.batch = request.priority == BATCH
        self._jobs[job.request_id] = job
        self._queue_rows(self._items(job, images), job.batch)
        self._emit(Started(request_id=job.request_id, prompt_tokens=job.prompt_tokens))

    def _items(self, job: _Job, images: ImageInputs) -> list[_Item]:
        """The job's inputs as queue items: texts shortest first, then the images."""
        dual = self.dual
        text_at = [i for i in range(len(job.tokens)) if i not in images.pixels]
        widths = [len(job.tokens[i]) for i in text_at]
        if dual is not None:
            widths = [max(w, dual.text_width) for w in widths]
        items = [_Item(job, text_at[k], widths[k]) for k in shortest_first(widths)]
        for index, pixels in images.pixels.items():
            items.append(_Item(job, index, images.widths[index], pixels))
        return items

    def _tokens(self, request: Embed) -> list[list[int]]:
        """Each text input as token ids, checked against the model's limits (errors
        name the input's position among all inputs, images included)."""
        images = set(request.images)
        count = len(request.texts or request.token_ids) + len(images)
        at = [i for i in range(count) if i not in images]
        info = self.info
        assert info is not None
        if request.texts and request.token_ids:
            raise RequestError("give either texts or token ids, not both", param="input")
        if request.texts:
            if not request.truncate:
                self._refuse_unfittable(request.texts, info.max_length, at)
            encoded = self.tokenizer(
                request.texts, add_special_tokens=True, truncation=False, verbose=False
            )
            tokens = [list(ids) for ids in encoded["input_ids"]]
        elif request.token_ids:
            tokens = [list(ids) for ids in request.token_ids]
            for i, ids in enumerate(tokens):
                bad = next((t for t in ids if not 0 <= t < info.vocab_size), None)
                if bad is not None:
                    raise RequestError(
                        f"input[{at[i]}] holds token id {bad}, outside the vocabulary "
                        f"(0..{info.vocab_size - 1})",
                        param=f"input[{at[i]}]",
                    )
        else:
            raise RequestError("the input is empty", param="input")
        limit = info.max_length
        for i, ids in enumerate(tokens):
            if not ids:
                raise RequestError(f"input[{at[i]}] is empty", param=f"input[{at[i]}]")
            if len(ids) <= limit:
                continue
            if not request.truncate:
                raise RequestError(
                    f"input[{at[i]}] is {len(ids)} tokens long, over this model's maximum input "
                    f"length of {limit} tokens; shorten it (or set truncate: true for the "
                    "model to cut inputs to the limit)",
                    param=f"input[{at[i]}]",
                    code="context_length_exceeded",
                )
            tokens[i] = self._truncated(request, i, ids)
        return tokens

    def _refuse_unfittable(self, texts: list[str], limit: int, at: list[int]) -> None:
        """An input that cannot fit, refused before the inputs are tokenized (see
        :mod:`...common.token_bound`)."""
        for i, text in enumerate(texts):
            tokens = self.token_bound.at_least([text])
            if tokens > limit:
                raise RequestError(
                    f"input[{at[i]}] is at least {tokens} tokens long "
                    f"({self.token_bound.reason(len(text))}), over this model's maximum "
                    f"input length of {limit} tokens; shorten it (or set truncate: true "
                    "for the model to cut inputs to the limit)",
                    param=f"input[{at[i]}]",
                    code="context_length_exceeded",
                )

    def _truncated(self, request: Embed, i: int, ids: list[int]) -> list[int]:
        """``ids`` cut to the limit; text is re-tokenized so it keeps its end token."""
        limit = self.info.max_length if self.info else len(ids)
        if not request.texts:
            return ids[:limit]
        encoded = self.tokenizer(
            request.texts[i], add_special_tokens=True, truncation=True, max_length=limit
        )
        return list(encoded["input_ids"])

    def counts(self) -> tuple[int, int]:
        running = sum(1 for job in list(self._jobs.values()) if job.vectors is not None)
        return running, len(self._jobs) - running

    # ------------------------------------------------------------ batches

    def step(self) -> None:
        batch = self._take()
        if not batch:
            return
        info = self.info
        assert info is not None
        texts = [item for item in batch if item.pixels is None]
        images = [item for item in batch if item.pixels is not None]
        done: list[tuple[_Item, np.ndarray]] = []
        if self.multi is not None:
            self._multi_step(self.multi, texts, images)
        else:
            if texts:
                done.extend(zip(texts, np.array(self._text_vectors(texts)), strict=True))
            if images:
                assert self.dual is not None
                pixels = [item.pixels for item in images]
                done.extend(zip(images, np.array(self.dual.image_vectors(pixels)), strict=True))
        for item, row in done:
            job = item.job
            if job.vectors is None:
                job.vectors = np.empty((len(job.tokens), info.dims), dtype=np.float32)
            job.vectors[item.index] = row
            job.remaining -= 1
        for job in self._finished():
            self._finish(job)

    def _multi_step(self, multi: MultiVector, texts: list[_Item], images: list[_Item]) -> None:
        """A multi-vector model's pass: the texts together, each image alone."""
        info = self.info
        assert info is not None
        rows = [item.job.tokens[item.index] for item in texts]
        found = list(zip(texts, multi.text_rows(rows, info.pad_id), strict=True)) if rows else []
        found += [(item, multi.image_rows(item.pixels)) for item in images]
        for item, vectors in found:
            item.job.token_vectors[item.index] = vectors
            item.job.remaining -= 1

    def _text_vectors(self, items: list[_Item]) -> mx.array:
        """One float32 vector per text item (evaluated by the caller)."""
        info = self.info
        assert info is not None
        rows = [item.job.tokens[item.index] for item in items]
        if self.dual is not None:
            return self.dual.text_vectors(rows, info.pad_id)
        output, mask, lengths = self._forward(rows)
        return pool(info.pooling, output, mask, lengths)

    def _forward(self, rows: list[list[int]]) -> tuple[Any, mx.array, mx.array]:
        """Run the model on ``rows`` padded on the right; returns its output, the
        attention mask and each row's length.

        Always on the right, whatever the tokenizer's ``padding_side``: causal models
        (Qwen3 embeddings, padding side "left") then never see padding before a
        token, where mlx-embeddings' fully masked rows turn into NaN, and the real
        tokens keep the positions they have alone."""
        info = self.info
        assert info is not None
        ids, mask = pad_right(rows, info.pad_id)
        mx_mask = mx.array(mask)
        output = self.model(mx.array(ids), attention_mask=mx_mask)
        return output, mx_mask, mx.array([len(r) for r in rows])

    def _finish(self, job: _Job) -> None:
        counts: list[int] = []
        if job.token_vectors:  # a multi-vector model: every input's rows, in order
            parts = [job.token_vectors[i] for i in range(len(job.tokens))]
            counts = [len(part) for part in parts]
            job.vectors = np.concatenate(parts)
        vectors = job.vectors
        assert vectors is not None
        if job.dimensions is not None and job.dimensions < vectors.shape[1]:
            vectors = vectors[:, : job.dimensions]
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.maximum(norms, 1e-12)
        matrix = np.ascontiguousarray(vectors, dtype="<f4")
        rows, dims = matrix.shape
        self._emit(
            Embeddings(
                request_id=job.request_id,
                rows=rows,
                dims=dims,
                prompt_tokens=job.prompt_tokens,
                vectors=counts,
            ),
            [memoryview(cast(Any, matrix)).cast("B")],
        )
        self._emit(Done(request_id=job.request_id, finish_reason="stop", usage=_usage(job)))


# ---------------------------------------------------------------- helpers


def _usage(job: _Job) -> Usage:
    return Usage(prompt_tokens=job.prompt_tokens)


def _hf_tokenizer(loaded: Any) -> Any:
    """The Hugging Face tokenizer inside what mlx-embeddings loaded: a
    ``TokenizerWrapper`` (which hides ``len()``) or a processor holding one."""
    inner = getattr(loaded, "_tokenizer", loaded)
    return getattr(inner, "tokenizer", inner)


def _positive_option(spec: WorkerSpec, key: str, default: int) -> int:
    value = spec.options.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LoadError(f"option {key} must be a positive integer, got {value!r}")
    return value


def _vocab_size(config: dict[str, Any], tokenizer: Any) -> int:
    """Token ids below this are valid: in the tokenizer and in the embedding table."""
    table = config.get("vocab_size") or (config.get("text_config") or {}).get("vocab_size")
    return min(len(tokenizer), table) if isinstance(table, int) and table > 0 else len(tokenizer)
