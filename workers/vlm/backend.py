"""Vision-language generation with mlx-vlm, continuously batched.

A request's images arrive as binary frames (see ``Generate.images``); its message
parts refer to them as ``{"type": "image", "detail": …}``. On :meth:`VlmBackend.submit`
(on the MLX thread, so other requests pause for it) the images are decoded
(:mod:`.vlm_images`), the chat template and the model's processor turn messages and
images into prompt tokens and pixels, and the vision tower runs: the request then
holds its prompt as input embeddings, and every check (images, template, context
length) has passed before ``Started``.

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
from mlx_vlm.prompt_utils import apply_chat_template
from mlx_vlm.tokenizer_utils import make_streaming_detokenizer
from mlx_vlm.utils import prepare_inputs, should_add_special_tokens
from mlx_vlm.vision_cache import VisionFeatureCache, processed_image_key
from PIL import Image

from mlx_gateway.protocol.messages import (
    IMAGE_PART,
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
from mlx_gateway.workers.common import system_turns
from mlx_gateway.workers.common.batch_requests import (
    Active,
    BatchRequests,
    check_sampling,
    completion_budget,
)
from mlx_gateway.workers.common.coalesce import Coalescer, interval_option
from mlx_gateway.workers.common.kv import KvAdmission, KvSettings, compute_dtype_bytes
from mlx_gateway.workers.common.tokenize import detokenized, text_tokens, tokens_reply
from mlx_gateway.workers.common.tool_prompt import ToolPrompt, probe_tool_prompt
from mlx_gateway.workers.runtime.contract import Emit, RequestError
from mlx_gateway.workers.runtime.hub import resolve_model_path
from mlx_gateway.workers.vlm.audio_input import decode_input_audio, sampling_rate, takes_audio
from mlx_gateway.workers.vlm.images import DETAILS, ImageLimits, decode_image, image_payload
from mlx_gateway.workers.vlm.model_settings import (
    config_dict,
    context_length_of,
    image_limits,
    set_chat_template,
)
from mlx_gateway.workers.vlm.row_sampler import argmax_sampler, row_processors

log = logging.getLogger(__name__)

VISION_CACHE_SIZE = 16
"""Encoded images kept for models whose mlx-vlm code reuses them (Gemma 4, Qwen 3.5…)."""
_TEXT_PARTS = ("text", "input_text")
_RESERVED_TEMPLATE_KWARGS = {
    "processor",
    "config",
    "prompt",
    "add_generation_prompt",
    "return_messages",
    "num_images",
    "num_audios",
    "tokenize",
}


@dataclass
class Prompt:
    """A request's prompt, ready for the batch: token ids and the keyword arguments
    mlx-vlm's batch takes for it (input embeddings, position ids…)."""

    tokens: list[int]
    kwargs: dict[str, Any]
    where: str
    """The request field the prompt came from (``messages`` or ``prompt``)."""


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


class VlmBackend(BatchRequests[_Active, BatchGenerator]):
    """The ``vlm`` backend (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.model: Any = None
        self.processor: Any = None
        self.context_length: int | None = None
        self.limits = ImageLimits()
        self.kv_admission = KvAdmission()
        """Per-request admission by KV cache bytes (see :class:`~.kv.KvAdmission`)."""
        self._spec: WorkerSpec | None = None
        self._stream: mx.Stream | None = None
        self._prefix_cache: apc.APCManager | None = None
        self._vision_cache = VisionFeatureCache(max_size=VISION_CACHE_SIZE)
        self.tool_prompt = ToolPrompt()
        """Whether the chat template renders tools (see :mod:`.tool_prompt`)."""

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
        # A stream belongs to the thread that made it: this one, the MLX thread.
        self._stream = mx.new_stream(mx.default_device())
        if spec.options.get("prefix_cache", True):
            # In memory only: mlx-vlm's disk tier would write under ~/.cache.
            self._prefix_cache = apc.from_env(overrides={"enabled": True, "disk_enabled": False})
        self._generator = self._new_generator()
        self.tool_prompt = probe_tool_prompt(self._render, spec.served_model_name)
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
        assert self._stream is not None
        with mx.stream(self._stream):
            prompt = self._prompt(request, payloads)
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
        )
        self._queue.append(active)
        self._by_id[active.request_id] = active
        self._emit(Started(request_id=active.request_id, prompt_tokens=len(prompt.tokens)))

    def _prompt(self, request: Generate, payloads: Sequence[bytes]) -> Prompt:
        """Template, images and tokens → the prompt with its input embeddings."""
        raw, where, has_images, has_audio = self._inputs(request, payloads)
        tokens = raw["input_ids"].squeeze(0).tolist()
        kwargs = self._embed(raw, has_images, has_audio=has_audio)
        return Prompt(tokens=tokens, kwargs=kwargs, where=where)

    def _inputs(
        self, request: Generate, payloads: Sequence[bytes]
    ) -> tuple[dict[str, Any], str, bool, bool]:
        """The processor's output for the request (token ids with the image tokens
        expanded, pixels…), the field it came from, and whether it has images and
        audio. The vision tower does not run here."""
        images: list[Image.Image] = []
        audio: list[Any] = []
        if request.messages is not None:
            messages = self._template_messages(request, payloads, images, audio)
            text = self._apply_template(
                messages, len(images), request.chat_template_kwargs, audios=len(audio)
            )
            raw = self._processed(text, images, audio)
            where = "messages"
        elif isinstance(request.prompt, str):
            raw = self._processed(request.prompt, [])
            where = "prompt"
        elif isinstance(request.prompt, list):
            vocab = len(self.processor.tokenizer)
            bad = next((t for t in request.prompt if not 0 <= t < vocab), None)
            if bad is not None:
                raise RequestError(
                    f"token id {bad} in the prompt is outside the vocabulary (0..{vocab - 1})",
                    param="prompt",
                )
            raw = {"input_ids": mx.array([request.prompt])}
            where = "prompt"
        else:
            raise RequestError("either messages or prompt is required", param="messages")
        if raw["input_ids"].size == 0:
            raise RequestError(f"the {where} is empty", param=where)
        return raw, where, bool(images), bool(audio)

    def _count(self, request: CountTokens | Tokenize, payloads: Sequence[bytes]) -> list[int]:
        """The prompt tokens a ``Generate`` of the same messages (or text) would have."""
        if isinstance(request, Tokenize) and request.messages is None:
            return text_tokens(self.processor.tokenizer, request)
        as_generate = Generate(
            request_id=request.request_id,
            messages=request.messages,
            prompt=request.prompt if isinstance(request, CountTokens) else None,
            chat_template_kwargs=request.chat_template_kwargs,
            images=request.images if isinstance(request, CountTokens) else [],
        )
        assert self._stream is not None
        with mx.stream(self._stream):
            raw, _, _, _ = self._inputs(as_generate, payloads)
        return [int(t) for t in raw["input_ids"].squeeze(0).tolist()]

    def _template_messages(
        self,
        request: Generate,
        payloads: Sequence[bytes],
        images: list[Image.Image],
        audio: list[Any],
    ) -> list[dict[str, Any]]:
        """The messages as mlx-vlm's templates take them; decodes each image part's
        payload into ``images`` and each audio part's into ``audio``, in order. Audio
        parts leave the messages: mlx-vlm's templates put the audio markers at the end
        of the last user message (``num_audios``)."""
        assert request.messages is not None
        out: list[dict[str, Any]] = []
        for i, message in enumerate(request.messages):
            content = message.get("content")
            if not isinstance(content, list):
                out.append({**message, "content": "" if content is None else content})
                continue
            parts: list[dict[str, Any]] = []
            for j, part in enumerate(content):
                kind = part.get("type") if isinstance(part, dict) else None
                where = f"messages[{i}].content[{j}]"
                if kind in _TEXT_PARTS:
                    parts.append({"type": "text", "text": str(part.get("text", ""))})
                elif kind == IMAGE_PART:
                    payload = image_payload(request, payloads, len(images), where)
                    detail = str(part.get("detail") or "auto")
                    if detail not in DETAILS:
                        raise RequestError(
                            f"detail must be one of {', '.join(DETAILS)}, not '{detail}'",
                            param=f"{where}.image_url.detail",
                        )
                    images.append(
                        decode_image(
                            payload, where=f"{where}.image_url", detail=detail, limits=self.limits
                        )
                    )
                    parts.append({"type": IMAGE_PART})
                elif kind == "audio":
                    audio.append(self._audio(part, payloads, where, len(audio)))
                else:
                    raise RequestError(
                        f"content parts of type '{kind}' are not supported by this model",
                        param=f"{where}.type",
                    )
            out.append({**message, "content": parts})
        if len(images) != len(request.images):
            raise RequestError(
                f"the request names {len(request.images)} image payload(s) but its messages "
                f"have {len(images)} image part(s)",
                param="messages",
            )
        return out

    def _audio(self, part: dict[str, Any], payloads: Sequence[bytes], where: str, k: int) -> Any:
        """The samples of an audio part; a 400 naming the model when it takes no audio."""
        name = self._spec.served_model_name if self._spec else "this model"
        if not takes_audio(self.model):
            raise RequestError(
                f"The model '{name}' does not accept audio; send input_audio parts to a "
                "vision model with an audio encoder (an omni model such as Gemma 3n), or "
                "transcribe the audio first with /v1/audio/transcriptions.",
                param=f"{where}.input_audio",
                code="audio_not_supported",
            )
        if k >= 1 and not getattr(self.processor, "supports_multiple_audio", False):
            raise RequestError(
                f"The model '{name}' takes one audio clip per request; this one has more.",
                param=f"{where}.input_audio",
                code="too_many_audio_clips",
            )
        frame = part.get("payload")
        if not isinstance(frame, int) or not 0 <= frame < len(payloads):
            raise RequestError(f"{where}: audio payload {frame} is missing", param=where)
        rate = sampling_rate(self.processor)
        return decode_input_audio(payloads[frame], where=f"{where}.input_audio", rate=rate)

    def _apply_template(
        self,
        messages: list[dict[str, Any]],
        images: int,
        kwargs: dict[str, Any],
        audios: int = 0,
    ) -> str:
        extra = {k: v for k, v in kwargs.items() if k not in _RESERVED_TEMPLATE_KWARGS}
        if self.tool_prompt.fallback and extra.get("tools"):
            tools = extra.pop("tools")
            messages = self.tool_prompt.messages(
                messages, tools if isinstance(tools, list) else [tools]
            )

        def render(conversation: list[dict[str, Any]]) -> str:
            text = self._render(conversation, num_images=images, num_audios=audios, **extra)
            return text if isinstance(text, str) else ""

        messages = system_turns.for_template(messages, render)
        try:
            text = self._render(messages, num_images=images, num_audios=audios, **extra)
        except Exception as exc:
            # Jinja templates reject conversations with raise_exception(…): a client error.
            raise RequestError(
                f"the chat template rejected the messages: {exc}", param="messages"
            ) from None
        if not isinstance(text, str):  # a few model types return the message itself
            raise RequestError(
                f"model type '{self.model.config.model_type}' has no text chat template",
                param="messages",
            )
        return text

    def _render(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        """mlx-vlm's chat template (with the generation prompt) applied to ``messages``."""
        return apply_chat_template(self.processor, self.model.config, messages, **kwargs)

    def _processed(
        self, text: str, images: list[Image.Image], audio: list[Any] | None = None
    ) -> dict[str, Any]:
        """The processor's output: token ids, pixels when there are images, audio
        features when there is audio."""
        config = self.model.config
        try:
            return prepare_inputs(
                self.processor,
                images=images or None,
                audio=audio or None,
                prompts=text,
                image_token_index=getattr(config, "image_token_index", None),
                add_special_tokens=should_add_special_tokens(config.model_type, self.processor),
            )
        except Exception as exc:  # e.g. a processor that takes one image per prompt
            raise RequestError(
                f"the model's processor rejected the input: {exc}", param="messages"
            ) from None

    def _embed(
        self, raw: dict[str, Any], has_images: bool, *, has_audio: bool = False
    ) -> dict[str, Any]:
        """Run the vision tower and the token embedding now, so a failure is this
        request's error, not a failed batch step."""
        input_ids = raw["input_ids"]
        pixel_values = raw.get("pixel_values")
        data = {
            k: v for k, v in raw.items() if k not in ("input_ids", "pixel_values", "attention_mask")
        }
        cache_args: dict[str, Any] = {}
        if has_images and pixel_values is not None:
            cache_args = {
                "vision_cache": self._vision_cache,
                "_image_key": processed_image_key(pixel_values, **data),
            }
        embedded = self.model.get_input_embeddings(
            input_ids, pixel_values, mask=raw.get("attention_mask"), **data, **cache_args
        )
        kwargs = {**data, **{k: v for k, v in embedded.to_dict().items() if v is not None}}
        mx.eval([v for v in kwargs.values() if isinstance(v, mx.array)])
        if self._prefix_cache is not None:
            # The cache keys blocks by their tokens plus this salt; images and audio
            # (the processor's features: its markers are the same for every clip)
            # change it.
            image_hash = apc.hash_image_payload(pixel_values=pixel_values) if has_images else 0
            media = (
                {k: v for k, v in data.items() if isinstance(v, mx.array)} if has_audio else None
            )
            kwargs["_apc_semantic_hash"] = apc.semantic_extra_hash(
                image_hash=image_hash,
                media=media,
                model=self.model.language_model,
                processor=self.processor,
            )
        return kwargs

    def _max_tokens(self, prompt_tokens: int, max_tokens: int | None, where: str, fit: bool) -> int:
        """The completion budget; raises OpenAI's context_length_exceeded error
        (in the lm worker's words)."""

        def too_long(limit: int) -> str:
            return (
                f"This model's maximum context length is {limit} tokens. However, your "
                f"{where} resulted in {prompt_tokens} tokens (images included). Please "
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
