"""Vision-language generation with mlx-vlm, continuously batched.

A request's images arrive as binary frames (see ``Generate.images``); its message
parts refer to them as ``{"type": "image", "detail": …}``. On :meth:`VlmBackend.submit`
(on the MLX thread, so other requests pause for it) :mod:`.prompt` builds its
prompt: the images are decoded (:mod:`.images`), the chat template and the model's
processor turn messages and images into prompt tokens and pixels, and the vision
tower runs: the request then holds its prompt as input embeddings, and every check
(images, template, context length) has passed before ``Started``.

Concurrency: every accepted request shares one mlx-vlm ``BatchGenerator``
(continuous batching): up to ``spec.max_concurrency`` requests generate together,
joining and leaving between steps; later ones wait in arrival order. Text-only
requests join the same batch. mlx-vlm samples a batch with one sampler, so each
request's own settings run as its last logits processor (:mod:`.row_sampler`).
With ``max_concurrency: 1`` requests simply queue. The request bookkeeping (queue,
cancels, ``Done``, stop strings) is shared with the lm worker (:mod:`.batch_requests`).

Prefix cache (``options["prefix_cache"]``, on by default): mlx-vlm's automatic
prefix cache keeps the key/value blocks of recent prompts in memory and reuses the
longest cached prefix of a new prompt; ``usage.cached_tokens`` reports the tokens
it skipped. mlx-vlm only reuses prefixes without image tokens (a cached image
would need its features too), so repeated system prompts and conversations are
served from the cache, the part from the first image on is computed again.

Replies per request are those of the lm worker (see :mod:`.lm`): ``Started``, one
``Batch`` per step with new text, then ``Done`` (``stop``, ``length``,
``cancelled``); or an ``Error`` (400/413) before ``Started``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_vlm import apc
from mlx_vlm import load as load_vlm
from mlx_vlm.generate.ar import BatchGenerator
from mlx_vlm.tokenizer_utils import make_streaming_detokenizer

from mlx_gateway.protocol.messages import (
    BATCH,
    Chunk,
    CountTokens,
    Detokenize,
    Done,
    Generate,
    Limits,
    ModelFacts,
    Progress,
    Request,
    Started,
    Tokenize,
    Usage,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.common.batch_requests import (
    Active,
    BatchRequests,
    check_sampling,
    completion_budget,
)
from mlx_gateway.workers.common.coalesce import Coalescer, interval_option
from mlx_gateway.workers.common.kv import KvAdmission, KvSettings, compute_dtype_bytes
from mlx_gateway.workers.common.token_bound import TokenBound, refuse_unfittable
from mlx_gateway.workers.common.tokenize import detokenized, tokens_reply
from mlx_gateway.workers.common.tool_prompt import ToolPrompt
from mlx_gateway.workers.runtime.contract import Backend, Emit, RequestError
from mlx_gateway.workers.runtime.hub import resolve_model_path
from mlx_gateway.workers.vlm.images import ImageLimits
from mlx_gateway.workers.vlm.model_settings import (
    config_dict,
    context_length_of,
    image_limits,
    set_chat_template,
)
from mlx_gateway.workers.vlm.prompt import Prompt, Prompts
from mlx_gateway.workers.vlm.row_sampler import argmax_sampler, row_processors
from mlx_gateway.workers.vlm.video import video_limits

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class _Active(Active):
    """One accepted request and its streaming state (``cached``: prompt tokens
    mlx-vlm's prefix cache skipped)."""

    prompt: Prompt
    processors: list[Any] | None
    prefilled: bool = False
    kv_reserved: int = 0
    """KV cache bytes its prompt and completion budget may take (admission)."""

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt.tokens)


def create_backend() -> VlmBackend:
    return VlmBackend()


class VlmBackend(BatchRequests[_Active, BatchGenerator], Backend):
    """The ``vlm`` backend (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.model: Any = None
        self.processor: Any = None
        self.context_length: int | None = None
        self.token_bound = TokenBound(None)
        """Refuses a prompt that cannot fit before it is tokenized whole."""
        self.limits = ImageLimits()
        self.kv_admission = KvAdmission()
        """Per-request admission by KV cache bytes (see :class:`~.kv.KvAdmission`)."""
        self._spec: WorkerSpec | None = None
        self._stream: mx.Stream | None = None
        self._prefix_cache: apc.APCManager | None = None
        self._prompts: Prompts | None = None

    @property
    def prompts(self) -> Prompts:
        """What turns the loaded model's requests into prompts."""
        assert self._prompts is not None, "the model is not loaded"
        return self._prompts

    @property
    def tool_prompt(self) -> ToolPrompt:
        """Whether the chat template renders tools (see :mod:`.tool_prompt`)."""
        return self._prompts.tool_prompt if self._prompts is not None else ToolPrompt()

    # ------------------------------------------------------------ loading

    def load(self, spec: WorkerSpec, emit: Emit) -> ModelFacts:
        self._spec = spec
        self._emit = emit
        self.limits = image_limits(spec.options)
        self._out = Coalescer(self._emit_batch, interval_option(spec.options))

        def downloading(repo: str) -> None:
            emit(Progress(stage="download", detail=repo))

        path = resolve_model_path(spec.model_path, on_download=downloading)
        emit(Progress(stage="load", detail=str(path)))
        self.model, self.processor = load_vlm(str(path), trust_remote_code=spec.trust_remote_code)
        if spec.chat_template_file:
            set_chat_template(self.processor, spec.chat_template_file)
        config = config_dict(self.model.config)
        KvSettings.from_spec(spec).check_model(config)  # kv_bits: mlx-vlm applies it
        self.kv_admission = KvAdmission.for_model(config, spec, compute_dtype_bytes(self.model))
        self.context_length = spec.context_length or context_length_of(config)
        self.token_bound = TokenBound.of(self.processor.tokenizer)
        # A stream belongs to the thread that made it: this one, the MLX thread.
        self._stream = mx.new_stream(mx.default_device())
        if spec.options.get("prefix_cache", True):
            # In memory only: mlx-vlm's disk tier would write under ~/.cache.
            self._prefix_cache = apc.from_env(overrides={"enabled": True, "disk_enabled": False})
        self._generator = self._new_generator()
        self._prompts = Prompts(
            self.model,
            self.processor,
            name=spec.served_model_name,
            limits=self.limits,
            prefix_cache=self._prefix_cache,
            video=video_limits(spec.options),
        )
        return ModelFacts(
            context_length=self.context_length,
            model_type=config.get("model_type"),
            extra={
                "batching": "continuous" if spec.max_concurrency > 1 else "queue",
                "prefix_cache": "on" if self._prefix_cache is not None else "off",
                "tool_prompt": self.tool_prompt.fact,
            },
        )

    def generation_stream(self) -> mx.Stream | None:
        return self._stream

    def set_limits(self, limits: Limits) -> None:
        """The gateway says how much KV cache the budget leaves this model now."""
        self.kv_admission = dataclasses.replace(self.kv_admission, free=max(limits.kv_free, 0))

    def _new_generator(self) -> BatchGenerator:
        spec = self._spec
        assert spec is not None
        return BatchGenerator(
            self.model.language_model,
            self.processor,
            sampler=argmax_sampler,
            completion_batch_size=max(spec.max_concurrency, 1),
            prefill_batch_size=1,
            prefill_step_size=spec.prefill_step_size,
            compute_logprobs=False,
            stream=self._stream,
            apc_manager=self._prefix_cache,
            # KV cache quantization (kv_bits), mlx-vlm's own batch-quantized cache.
            kv_bits=spec.options.get("kv_bits"),
            kv_group_size=int(spec.options.get("kv_group_size", 64)),
            quantized_kv_start=int(spec.options.get("quantized_kv_start", 0)),
        )

    # ------------------------------------------------------------ requests

    def submit(self, request: Request, payloads: Sequence[bytes]) -> None:
        if isinstance(request, CountTokens):
            refuse_unfittable(
                self.token_bound, self.context_length, request.messages, request.prompt
            )
            usage = Usage(prompt_tokens=len(self._count(request, payloads)))
            self._emit(Done(request_id=request.request_id, finish_reason="counted", usage=usage))
            return
        if isinstance(request, Tokenize | Detokenize):
            tokenizer = self.processor.tokenizer
            if isinstance(request, Detokenize):
                self._emit(detokenized(tokenizer, request))
            else:
                self._emit(tokens_reply(tokenizer, request, self._count(request, payloads)))
            self._emit(Done(request_id=request.request_id, finish_reason="stop"))
            return
        if not isinstance(request, Generate):
            raise RequestError(f"a vlm worker does not serve '{type(request).__name__}' requests")
        if request.request_id in self._by_id:
            log.warning("duplicate request_id %s ignored", request.request_id)
            return
        _check_supported(request)
        params = request.sampling
        check_sampling(params)
        if request.adapters:
            raise RequestError(
                "LoRA adapters are served for language models (model_type lm) only; "
                "send this request without 'adapter'",
                param="adapter",
            )
        refuse_unfittable(
            self.token_bound,
            self.context_length,
            request.messages,
            request.prompt,
            params.max_tokens,
        )
        assert self._stream is not None
        with mx.stream(self._stream):
            prompt = self.prompts.prompt(request, payloads)
        max_tokens = self._max_tokens(
            len(prompt.tokens), params.max_tokens, prompt.where, params.fit_max_tokens
        )
        max_tokens = self.kv_admission.admit(
            len(prompt.tokens), max_tokens, params.max_tokens is not None
        )
        active = _Active(
            request_id=request.request_id,
            prompt=prompt,
            max_tokens=max_tokens,
            processors=row_processors(params, prompt.tokens),
            stops=[s for s in params.stop if s],
            detokenizer=make_streaming_detokenizer(self.processor),
            kv_reserved=self.kv_admission.bytes_for(len(prompt.tokens) + max_tokens),
            batch=request.priority == BATCH,
        )
        self._enqueue(active)
        self._emit(Started(request_id=active.request_id, prompt_tokens=len(prompt.tokens)))

    def _count(self, request: CountTokens | Tokenize, payloads: Sequence[bytes]) -> list[int]:
        """The prompt tokens a ``Generate`` of the same messages (or text) would have."""
        assert self._stream is not None
        with mx.stream(self._stream):
            return self.prompts.count(request, payloads)

    def _max_tokens(self, prompt_tokens: int, max_tokens: int | None, where: str, fit: bool) -> int:
        """The completion budget; raises OpenAI's context_length_exceeded error
        (in the lm worker's words)."""

        def too_long(limit: int) -> str:
            return (
                f"This model's maximum context length is {limit} tokens. However, your "
                f"{where} resulted in {prompt_tokens} tokens (images and videos included). Please "
                f"reduce the length of the {where}."
            )

        return completion_budget(
            self.context_length, prompt_tokens, max_tokens, where, too_long, fit
        )

    # ------------------------------------------------------------ generation

    def step(self) -> None:
        generator = self._generator
        assert generator is not None and self._spec is not None
        if self._queue:
            self._out.flush()  # the step that prefills them may be long
        self._admit(generator)
        if not self._by_uid:
            return
        # mlx-vlm starts a prefill only when this many rows are free in the batch;
        # asking for no more than are free lets a request join a running batch.
        decoding = sum(1 for a in self._by_uid.values() if a.prefilled)
        free = max(self._spec.max_concurrency, 1) - decoding
        generator.prefill_batch_size = max(1, min(self._spec.prefill_batch_size, free))
        prompts, responses = generator.next()
        for progress in prompts:
            active = self._by_uid.get(progress.uid)
            if active is not None:
                active.prefilled = True
                active.cached = progress.cached_tokens
        chunks: list[Chunk] = []
        finished: list[_Active] = []
        for response in responses:
            active = self._by_uid.get(response.uid)
            if active is None:
                continue
            active.prefilled = True
            chunk = self._advance(active, int(response.token), response.finish_reason)
            if chunk is not None:
                chunks.append(chunk)
            if active.finish is not None:
                finished.append(active)
        if chunks:
            self._out.add(chunks)
        for active in finished:
            self._finish(active, active.finish or "stop")

    def _admit(self, generator: BatchGenerator) -> None:
        assert self._spec is not None
        while self._queue and len(self._by_uid) < max(self._spec.max_concurrency, 1):
            reserved = sum(a.kv_reserved for a in self._by_uid.values())
            if self._by_uid and not self.kv_admission.fits_beside(
                reserved, self._queue[0].kv_reserved
            ):
                break  # it waits until running requests free their KV cache
            active = self._queue.popleft()
            (uid,) = generator.insert(
                [active.prompt.tokens],
                max_tokens=[active.max_tokens],
                prompt_kwargs=[active.prompt.kwargs],
                logits_processors=[active.processors],
            )
            active.uid = uid
            self._by_uid[uid] = active

    def _advance(self, active: _Active, token: int, finish: str | None) -> Chunk | None:
        """Take one generated token: detokenize, apply stop strings, decide the finish."""
        text = self._apply_stops(active, self._take_token(active, token, finish), finish)
        if not text:
            return None
        chunk = Chunk(request_id=active.request_id, text=text, tokens=active.unsent_tokens)
        active.unsent_tokens = 0
        return chunk

    def _leave_batch(self, active: _Active) -> None:
        assert self._generator is not None and active.uid is not None
        self._generator.remove(active.uid)


# ---------------------------------------------------------------- helpers


def _check_supported(request: Generate) -> None:
    """Refuse what this worker cannot honour, rather than ignore it."""
    if request.constraint is not None:
        raise RequestError(
            "constrained decoding (response_format json_schema/json_object, forced tool "
            "calls) is not supported by vision models yet",
            param=request.constraint.param,
            code="unsupported_parameter",
        )
    if request.logprobs is not None:
        raise RequestError(
            "logprobs are not supported by vision models yet",
            param="logprobs",
            code="unsupported_parameter",
        )
