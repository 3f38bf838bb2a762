"""Text generation with mlx-lm, continuously batched.

Accepted requests share one ``BatchGenerator``: requests join and leave it
between steps, up to ``spec.max_concurrency`` at once; later ones wait in arrival
order. Each call of :meth:`LmBackend.step` runs one generator step (a decode step
for the running requests plus at most ``prefill_step_size`` prompt tokens of the
joining ones), so cancels and new requests are seen between steps. A request that
runs alone decodes outside the batch (:mod:`.solo`, faster for one stream) and
moves into it, cache and all, as soon as another request arrives. The request
bookkeeping (queue, cancels, ``Done``, stop strings) is shared with the vlm worker
(:mod:`.batch_requests`).

Text leaves through a :class:`~.coalesce.Coalescer`: one ``Batch`` per step, or per
``stream_interval`` when steps come faster than that.

Replies per request::

    Started(prompt_tokens)   checks passed (prompt fits the context); sent on
                             admission, also when the request must wait in the queue
    Batch(chunks=[…])        one message per step (or per stream_interval) for all
                             requests with new text; always a Batch (never a lone
                             Chunk), so the gateway has one path; ``Chunk.tokens``
                             counts the tokens generated since that request's
                             previous chunk
    Done(finish_reason, usage)   "stop" (EOS or a stop string), "length"
                             (max_tokens, or the context is full) or "cancelled"

or one ``Error`` instead of all of these when a check fails (400, before
``Started``). ``usage.completion_tokens`` counts every generated token, the EOS
token included (its text is never sent) and the token that completed a stop string.

Prompt cache: a request that ends leaves its KV cache (prompt and completion) in a
:class:`~.prompt_cache.PromptCache`; a request admitted later starts from the entry
sharing the longest token prefix with its prompt and prefills only the rest (the
next turn of a chat re-reads only the new turn). ``usage.cached_tokens`` counts the
reused tokens. Options (``spec.options``): ``prompt_cache_bytes`` and
``prompt_cache_entries``; either 0 turns the cache off.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
from mlx_lm import load as load_model_and_tokenizer
from mlx_lm.generate import BatchGenerator

from mlx_gateway.protocol.messages import (
    CountTokens,
    Detokenize,
    Done,
    Generate,
    ModelFacts,
    MountAdapter,
    Progress,
    Request,
    Started,
    Tokenize,
    UnmountAdapter,
    Usage,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.common.batch_requests import (
    check_sampling,
    completion_budget,
    overflow_message,
)
from mlx_gateway.workers.common.coalesce import Coalescer, interval_option
from mlx_gateway.workers.common.kv import KvAdmission, KvSettings, compute_dtype_bytes
from mlx_gateway.workers.common.sampling import (
    make_request_processors,
    make_request_sampler,
)
from mlx_gateway.workers.common.token_bound import TokenBound, refuse_unfittable
from mlx_gateway.workers.common.tokenize import detokenized, text_tokens, tokens_reply
from mlx_gateway.workers.common.tool_prompt import probe_tool_prompt
from mlx_gateway.workers.lm import batch_filter, ssm_lengths
from mlx_gateway.workers.lm.adapters import Adapters, read_adapter
from mlx_gateway.workers.lm.chat_format import opens_thinking, template_facts
from mlx_gateway.workers.lm.checkpoints import checkpoint_settings
from mlx_gateway.workers.lm.detokenize import Detokenizers
from mlx_gateway.workers.lm.disk_cache import DiskCache, model_key
from mlx_gateway.workers.lm.gguf.convert import gguf_model
from mlx_gateway.workers.lm.grammar import Grammars
from mlx_gateway.workers.lm.loading import (
    context_length_of,
    kv_option_names,
    load_sharded,
    option_int,
    read_template,
)
from mlx_gateway.workers.lm.logprobs import LogprobTrack
from mlx_gateway.workers.lm.prefill_pace import PrefillPace
from mlx_gateway.workers.lm.prompt import SystemEnds, prompt_tokens
from mlx_gateway.workers.lm.prompt_cache import PromptCache
from mlx_gateway.workers.lm.scheduling import LmActive, LmScheduling
from mlx_gateway.workers.lm.solo import supports_solo
from mlx_gateway.workers.lm.speculative import DRAFT_TOKENS, Draft, load_draft
from mlx_gateway.workers.lm.thinking_budget import make_thinking_budget
from mlx_gateway.workers.lm.tool_scan import make_tool_scan
from mlx_gateway.workers.runtime.blas import blas_in_use
from mlx_gateway.workers.runtime.contract import Emit, LoadError, RequestError
from mlx_gateway.workers.runtime.hub import resolve_model_path

log = logging.getLogger(__name__)

PROMPT_CACHE_BYTES = 512 * 1024**2
PROMPT_CACHE_ENTRIES = 32
"""Prompt cache caps when the spec's options leave them out."""


def create_backend() -> LmBackend:
    return LmBackend()


class LmBackend(LmScheduling):
    """The ``lm`` backend (see the module docstring for the reply sequence)."""

    token_bound = TokenBound(None)
    """Refuses a prompt that cannot fit before it is tokenized (set at load)."""

    # ------------------------------------------------------------ loading

    def load(self, spec: WorkerSpec, emit: Emit) -> ModelFacts:
        self._spec = spec
        self._emit = emit

        def downloading(repo: str) -> None:
            emit(Progress(stage="download", detail=repo))

        def converting(label: str) -> None:
            emit(Progress(stage="download", detail=f"converting GGUF {label} to MLX"))

        path = gguf_model(spec.model_path, converting) or resolve_model_path(
            spec.model_path, on_download=downloading
        )
        tokenizer_config: dict[str, Any] = {}
        if spec.chat_template_file:
            tokenizer_config["chat_template"] = read_template(spec.chat_template_file)
        emit(Progress(stage="load", detail=str(path)))
        parallel = spec.options.get("distributed")
        if parallel:
            model, tokenizer, config = load_sharded(str(path), parallel, tokenizer_config, spec)
        else:
            model, tokenizer, config = cast(
                tuple[Any, Any, dict[str, Any]],
                load_model_and_tokenizer(
                    str(path),
                    tokenizer_config=tokenizer_config,
                    return_config=True,
                    trust_remote_code=spec.trust_remote_code,
                ),
            )
        self.model, self.tokenizer = model, tokenizer
        self.token_bound = TokenBound.of(tokenizer)
        self.detokenizers = Detokenizers(tokenizer)
        self.kv = KvSettings.from_spec(spec)
        self.kv.check_model(config)
        self.kv_admission = KvAdmission.for_model(config, spec, compute_dtype_bytes(model))
        self.context_length = spec.context_length or context_length_of(config, tokenizer)
        # Made here, on the MLX thread: a stream belongs to the thread that made it
        # (mlx-lm's module-level generation_stream belongs to whoever imported it).
        self._stream = mx.new_stream(mx.default_device())
        with mx.stream(self._stream):
            batch_filter.install()
            self.prefill_together = ssm_lengths.batches_right(model)
        self._generator = self._new_generator()
        self.pace = PrefillPace(spec.prefill_step_size)
        self.grammars = Grammars(tokenizer)
        if tokenizer.has_chat_template:

            def render(messages: list[dict[str, Any]], **kwargs: Any) -> str:
                return str(
                    tokenizer.apply_chat_template(
                        messages, tokenize=False, add_generation_prompt=True, **kwargs
                    )
                )

            self.tool_prompt = probe_tool_prompt(render, spec.served_model_name)
        self.solo_enabled = supports_solo(model) and self.kv.max_size is None
        if self.kv.bits is not None and not self.solo_enabled:
            raise LoadError(
                "kv_bits needs a model whose KV cache is a plain cache in every layer "
                "(llama, qwen, mistral…) and no max_kv_size: mlx-lm quantizes only such "
                "caches; remove kv_bits (or max_kv_size) from this model's entry"
            )
        self.adapters = Adapters(model)
        skipped = []
        for adapter_id, adapter_path in dict(spec.options.get("adapters") or {}).items():
            try:
                self.adapters.mount(read_adapter(str(adapter_id), str(adapter_path)))
            except RequestError as exc:  # the model serves on; requests naming it get a 400
                log.warning("adapter %s not mounted: %s", adapter_id, exc.message)
                skipped.append(f"{adapter_id}: {exc.message}")
        if draft_path := spec.options.get("draft_model_path"):
            self.draft = self._load_draft(str(draft_path), spec, parallel, downloading)
        self._out = Coalescer(self._emit_batch, interval_option(spec.options))
        cache_bytes = option_int(spec, "prompt_cache_bytes", PROMPT_CACHE_BYTES)
        if parallel == "pipeline" and cache_bytes:
            # Each rank holds other layers, so the same cache takes other bytes on
            # each, and a byte bound would evict different entries on different
            # ranks (then their prefills differ and the group falls out of step).
            log.info("prompt cache off: pipeline ranks cannot agree on its bytes")
            cache_bytes = 0
        self.prompt_cache = PromptCache(
            cache_bytes, option_int(spec, "prompt_cache_entries", PROMPT_CACHE_ENTRIES)
        )
        if folder := spec.options.get("prompt_cache_dir"):
            kv = ",".join(f"{k}={spec.options.get(k)}" for k in sorted(kv_option_names(spec)))
            adapters = self.adapters

            def disk_tier(adapter: str) -> DiskCache:
                """The disk tier of the base model ("") or of an adapter set: a folder
                whose key names the adapters' files, so a changed adapter misses."""
                return DiskCache(
                    Path(str(folder)).expanduser(),
                    model_key(spec.model_path, Path(path), adapter=adapter, kv=kv),
                    option_int(spec, "prompt_cache_disk_bytes", 0),
                    option_int(spec, "prompt_cache_dir_bytes", 0) or None,
                )

            self.prompt_cache.disk = disk_tier("")
            self.prompt_cache.space_disk = lambda space: disk_tier(adapters.identity(space))
        self.system_ends = SystemEnds()
        self.cuts, self.checkpoint_every = checkpoint_settings(
            model, self._stream, self.context_length, cache_bytes, measure=not parallel
        )
        extra = {
            "vocab_size": str(config.get("vocab_size", "")),
            "blas": blas_in_use(),
            **template_facts(tokenizer),
            "tool_prompt": self.tool_prompt.fact,
        }
        if self.adapters.mounted:
            extra["adapters"] = ", ".join(self.adapters.mounted)
        if skipped:
            extra["adapters_skipped"] = "; ".join(skipped)
        if self.draft is not None:
            extra["draft_model"] = f"{self.draft.path} ({self.draft.tokens} tokens a round)"
        return ModelFacts(
            context_length=self.context_length,
            model_type=config.get("model_type"),
            extra=extra,
        )

    def _load_draft(self, path: str, spec: WorkerSpec, parallel: object, downloading: Any) -> Draft:
        """The draft model of ``draft_model_path``, checked against this model."""
        if parallel:
            raise LoadError(
                "draft_model_path cannot be used with distributed: remove one of them "
                "from this model's entry"
            )
        if not self.solo_enabled or self.kv.bits is not None:
            raise LoadError(
                "speculative decoding (draft_model_path) needs a model whose KV cache is a "
                "plain, unquantized cache in every layer (llama, qwen, mistral…), without "
                "kv_bits or max_kv_size; remove draft_model_path or those keys"
            )
        assert self.tokenizer is not None
        self._emit(Progress(stage="load", detail=f"draft model {path}"))
        draft = load_draft(
            path,
            option_int(spec, "num_draft_tokens", DRAFT_TOKENS),
            self.tokenizer.get_vocab(),
            spec.trust_remote_code,
            downloading,
        )
        log.info("speculative decoding with %s, %d tokens a round", path, draft.tokens)
        return draft

    def close(self) -> None:
        """Write the prompt cache to its disk tier (if any), then free the batch."""
        try:
            written = self.prompt_cache.spill()
            if written:
                log.info("wrote %d prompt cache entries to disk", written)
        except Exception:  # the worker stops anyway; a lost cache only costs a prefill
            log.exception("writing the prompt cache to disk failed")
        super().close()

    def step_label(self) -> str:
        """``prefill of 4096 tokens``, ``decode of 2 requests``, or both."""
        actives = list(self._by_id.values())
        prefill = [a for a in actives if a.solo is None and not a.decoding]
        decode = len(actives) - len(prefill)
        parts = []
        if prefill:
            parts.append(f"prefill of {sum(a.prompt_tokens for a in prefill)} tokens")
        if decode or not prefill:
            parts.append(f"decode of {decode} request{'s' if decode != 1 else ''}")
        return ", ".join(parts)

    def _new_generator(self) -> BatchGenerator:
        spec = self._spec
        assert spec is not None and self.tokenizer is not None
        concurrency = max(spec.max_concurrency, 1)
        prompts = max(min(spec.prefill_batch_size, concurrency), 1) if self.prefill_together else 1
        return BatchGenerator(
            self.model,
            stop_tokens=[[t] for t in sorted(self.tokenizer.eos_token_ids)],
            completion_batch_size=concurrency,
            prefill_batch_size=prompts,
            prefill_step_size=spec.prefill_step_size,
            stream=self._stream,
            max_kv_size=self.kv.max_size,
        )

    # ------------------------------------------------------------ requests

    def submit(self, request: Request, payloads: Sequence[bytes]) -> None:
        if isinstance(request, CountTokens):
            self._count(request)
            return
        if isinstance(request, Tokenize | Detokenize):
            self._tokenize(request)
            return
        if isinstance(request, MountAdapter | UnmountAdapter):
            self._adapter_request(request)
            return
        if not isinstance(request, Generate):
            raise RequestError(f"an lm worker does not serve '{type(request).__name__}' requests")
        if request.request_id in self._by_id:
            log.warning("duplicate request_id %s ignored", request.request_id)
            return
        params = request.sampling
        check_sampling(params)
        assert self.adapters is not None
        adapters = self.adapters.ids(request.adapters)
        self._refuse_unfittable(request, params.max_tokens)
        prompt, where = self._prompt_tokens(request)
        max_tokens = self._max_tokens(len(prompt), params.max_tokens, where, params.fit_max_tokens)
        max_tokens = self.kv_admission.admit(len(prompt), max_tokens, params.max_tokens is not None)
        assert self.tokenizer is not None
        processors = make_request_processors(params, len(prompt))
        if request.constraint is not None:
            assert self.grammars is not None
            processors.append(self.grammars.processor(request.constraint, prompt))
        reasoning = request.messages is not None and opens_thinking(self.tokenizer, prompt)
        budget = make_thinking_budget(self.tokenizer, request.thinking_budget, prompt, reasoning)
        if budget is not None:
            processors.append(budget)
        active = LmActive(
            request_id=request.request_id,
            prompt=prompt,
            max_tokens=max_tokens,
            sampler=make_request_sampler(params),
            processors=processors,
            stops=[s for s in params.stop if s],
            detokenizer=self.detokenizers.new(),
            kv_reserved=self.kv_admission.bytes_for(len(prompt) + max_tokens),
            adapters=adapters,
        )
        if request.logprobs is not None:
            active.logprobs = LogprobTrack(self.tokenizer, request.logprobs)
        if request.parse_tools:
            active.tools = make_tool_scan(self.tokenizer, request.chat_template_kwargs.get("tools"))
        active.plain = not active.stops and active.logprobs is None and active.tools is None
        if request.messages is not None and self.prompt_cache.enabled:
            active.system_end = self.system_ends.find(
                self.tokenizer,
                request.messages,
                request.chat_template_kwargs,
                self.tool_prompt,
                prompt,
            )
        self._queue.append(active)
        self._by_id[active.request_id] = active
        self._emit(
            Started(
                request_id=active.request_id,
                prompt_tokens=len(prompt),
                reasoning=reasoning,
            )
        )

    def _adapter_request(self, request: MountAdapter | UnmountAdapter) -> None:
        """Mount or unmount an adapter between two steps; answered at once."""
        assert self.adapters is not None
        users = sum(request.adapter_id in a.adapters for a in self._by_id.values())
        finish = self.adapters.apply(request, users)
        self._forget_caches_of(request.adapter_id)  # a replaced one's are stale
        log.info("%s adapter %s", finish, request.adapter_id)
        self._emit(Done(request_id=request.request_id, finish_reason=finish))

    def _forget_caches_of(self, adapter_id: str) -> None:
        for space in self.prompt_cache.spaces():
            if adapter_id in space.split("+"):
                self.prompt_cache.forget(space)

    def _count(self, request: CountTokens) -> None:
        """Answer a :class:`CountTokens` at once: one ``Done`` carrying the count (a
        prompt that surely cannot fit is the context error, as for a ``Generate``)."""
        self._refuse_unfittable(request, None)
        as_generate = Generate(
            request_id=request.request_id,
            messages=request.messages,
            prompt=request.prompt,
            chat_template_kwargs=request.chat_template_kwargs,
        )
        prompt, _ = self._prompt_tokens(as_generate)
        usage = Usage(prompt_tokens=len(prompt))
        self._emit(Done(request_id=request.request_id, finish_reason="counted", usage=usage))

    def _tokenize(self, request: Tokenize | Detokenize) -> None:
        """Answer a :class:`Tokenize` (text, or messages through the chat template as
        for a ``Generate``) or a :class:`Detokenize` at once."""
        tokenizer = self.tokenizer
        assert tokenizer is not None
        if isinstance(request, Detokenize):
            reply = detokenized(tokenizer, request)
        elif request.messages is not None:
            as_generate = Generate(
                request_id=request.request_id,
                messages=request.messages,
                chat_template_kwargs=request.chat_template_kwargs,
            )
            reply = tokens_reply(tokenizer, request, self._prompt_tokens(as_generate)[0])
        else:
            reply = tokens_reply(tokenizer, request, text_tokens(tokenizer, request))
        self._emit(reply)
        self._emit(Done(request_id=request.request_id, finish_reason="stop"))

    def _refuse_unfittable(self, request: Generate | CountTokens, max_tokens: int | None) -> None:
        """A prompt that cannot fit the context, refused before it is tokenized
        whole (see :mod:`...common.token_bound`)."""
        refuse_unfittable(
            self.token_bound, self.context_length, request.messages, request.prompt, max_tokens
        )

    def _prompt_tokens(self, request: Generate) -> tuple[list[int], str]:
        """The prompt as token ids, and the field it came from (for error params)."""
        assert self.tokenizer is not None
        return prompt_tokens(self.tokenizer, request, self.tool_prompt)

    def _max_tokens(self, prompt_tokens: int, max_tokens: int | None, where: str, fit: bool) -> int:
        """The completion budget; raises the OpenAI context_length_exceeded error."""

        def too_long(limit: int) -> str:
            if max_tokens is not None:
                return overflow_message(limit, prompt_tokens, max_tokens, where)
            return (
                f"This model's maximum context length is {limit} tokens. However, your "
                f"{where} resulted in {prompt_tokens} tokens. Please reduce the length "
                f"of the {where}."
            )

        return completion_budget(
            self.context_length, prompt_tokens, max_tokens, where, too_long, fit
        )
