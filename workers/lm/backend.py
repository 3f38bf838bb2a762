"""Text generation with mlx-lm, continuously batched.

Accepted requests share one ``BatchGenerator``: requests join and leave it
between steps, up to ``spec.max_concurrency`` at once; later ones wait in arrival
order. Each call of :meth:`LmBackend.step` runs one step of its
:class:`~.scheduling.Scheduler` (made at load), one generator step (a decode step
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
from mlx_lm.tokenizer_utils import TokenizerWrapper

from mlx_gateway.protocol.messages import (
    BATCH,
    CountTokens,
    Detokenize,
    Done,
    Generate,
    Limits,
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
from mlx_gateway.workers.common.coalesce import interval_option
from mlx_gateway.workers.common.kv import KvAdmission, KvSettings, compute_dtype_bytes
from mlx_gateway.workers.common.sampling import (
    make_request_processors,
    make_request_sampler,
)
from mlx_gateway.workers.common.token_bound import TokenBound, refuse_unfittable
from mlx_gateway.workers.common.tokenize import detokenized, text_tokens, tokens_reply
from mlx_gateway.workers.common.tool_prompt import ToolPrompt, probe_tool_prompt
from mlx_gateway.workers.lm import batch_filter, ssm_lengths
from mlx_gateway.workers.lm.active import LmActive
from mlx_gateway.workers.lm.adapters import Adapters, read_adapter
from mlx_gateway.workers.lm.chat_format import opens_thinking, template_facts
from mlx_gateway.workers.lm.checkpoints import checkpoint_settings
from mlx_gateway.workers.lm.detokenize import Detokenizers
from mlx_gateway.workers.lm.fair_share import linger_option
from mlx_gateway.workers.lm.gguf.model import gguf_model
from mlx_gateway.workers.lm.grammar import Grammars
from mlx_gateway.workers.lm.loading import (
    context_length_of,
    load_sharded,
    option_int,
    prompt_cache_for,
    read_template,
)
from mlx_gateway.workers.lm.logprobs import LogprobTrack
from mlx_gateway.workers.lm.prompt import SystemEnds, prompt_tokens
from mlx_gateway.workers.lm.prompt_cache import PromptCache, token_bytes
from mlx_gateway.workers.lm.scheduling import Scheduler
from mlx_gateway.workers.lm.solo import supports_solo
from mlx_gateway.workers.lm.speculative import DRAFT_TOKENS, Draft, load_draft
from mlx_gateway.workers.lm.thinking_budget import make_thinking_budget
from mlx_gateway.workers.lm.tool_scan import make_tool_scan
from mlx_gateway.workers.runtime.blas import blas_in_use
from mlx_gateway.workers.runtime.contract import Backend, Emit, LoadError, RequestError, drop
from mlx_gateway.workers.runtime.hub import resolve_model_path

log = logging.getLogger(__name__)


def create_backend() -> LmBackend:
    return LmBackend()


class LmBackend(Backend):
    """The ``lm`` backend (see the module docstring for the reply sequence): loads
    the model, checks each request and turns it into an :class:`~.active.LmActive`;
    its :class:`~.scheduling.Scheduler`, made at load, runs them."""

    token_bound = TokenBound(None)
    """Refuses a prompt that cannot fit before it is tokenized (set at load)."""

    def __init__(self) -> None:
        self._scheduler: Scheduler | None = None
        self._emit: Emit = drop
        self.model: Any = None
        self.tokenizer: TokenizerWrapper | None = None
        self.context_length: int | None = None
        self.prompt_cache = PromptCache(0, 0)
        self.grammars: Grammars | None = None
        self.tool_prompt = ToolPrompt()
        """Whether the chat template renders tools (else the worker does; see
        :mod:`.tool_prompt`), found once at load."""
        self.adapters: Adapters | None = None
        """The LoRA adapters mounted on the model (see :mod:`.adapters`)."""
        self.system_ends = SystemEnds()

    @property
    def scheduler(self) -> Scheduler:
        """Runs the accepted requests (made by :meth:`load`)."""
        assert self._scheduler is not None, "the model is not loaded"
        return self._scheduler

    # ------------------------------------------------------------ loading

    def load(self, spec: WorkerSpec, emit: Emit) -> ModelFacts:
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
        kv = KvSettings.from_spec(spec)
        kv.check_model(config)
        kv_admission = KvAdmission.for_model(config, spec, compute_dtype_bytes(model))
        self.context_length = spec.context_length or context_length_of(config, tokenizer)
        # Made here, on the MLX thread: a stream belongs to the thread that made it
        # (mlx-lm's module-level generation_stream belongs to whoever imported it).
        stream = mx.new_stream(mx.default_device())
        with mx.stream(stream):
            batch_filter.install()
            prefill_together = ssm_lengths.batches_right(model)
        self.grammars = Grammars(tokenizer)
        if tokenizer.has_chat_template:

            def render(messages: list[dict[str, Any]], **kwargs: Any) -> str:
                return str(
                    tokenizer.apply_chat_template(
                        messages, tokenize=False, add_generation_prompt=True, **kwargs
                    )
                )

            self.tool_prompt = probe_tool_prompt(render, spec.served_model_name)
        solo = supports_solo(model) and kv.max_size is None
        if kv.bits is not None and not solo:
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
        draft = None
        if draft_path := spec.options.get("draft_model_path"):
            draft = self._load_draft(str(draft_path), spec, parallel, downloading, solo, kv)
        self.prompt_cache = prompt_cache_for(spec, Path(path), self.adapters, parallel)
        self.system_ends = SystemEnds()
        cuts, checkpoint_every = checkpoint_settings(
            model, stream, self.context_length, self.prompt_cache.max_bytes, measure=not parallel
        )
        concurrency = max(spec.max_concurrency, 1)
        self._scheduler = Scheduler(
            model,
            tokenizer.eos_token_ids,
            emit=emit,
            stream=stream,
            concurrency=concurrency,
            prefill_batch_size=(
                max(min(spec.prefill_batch_size, concurrency), 1) if prefill_together else 1
            ),
            prefill_step_size=spec.prefill_step_size,
            kv=kv,
            kv_admission=kv_admission,
            prompt_cache=self.prompt_cache,
            adapters=self.adapters,
            draft=draft,
            solo=solo,
            cuts=cuts,
            checkpoint_every=checkpoint_every,
            stream_interval=interval_option(spec.options),
            linger=linger_option(spec.options),
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
        if draft is not None:
            extra["draft_model"] = f"{draft.path} ({draft.tokens} tokens a round)"
        return ModelFacts(
            context_length=self.context_length,
            model_type=config.get("model_type"),
            extra=extra,
        )

    def _load_draft(
        self,
        path: str,
        spec: WorkerSpec,
        parallel: object,
        downloading: Any,
        solo: bool,
        kv: KvSettings,
    ) -> Draft:
        """The draft model of ``draft_model_path``, checked against this model
        (``solo``: whether its requests may decode alone)."""
        if parallel:
            raise LoadError(
                "draft_model_path cannot be used with distributed: remove one of them "
                "from this model's entry"
            )
        if not solo or kv.bits is not None:
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
        if self._scheduler is not None:
            self._scheduler.close()

    # ------------------------------------------------------------ the scheduler's

    def step(self) -> None:
        self.scheduler.step()

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def cancel(self, request_id: str) -> None:
        self.scheduler.cancel(request_id)

    def cancel_all(self) -> None:
        self.scheduler.cancel_all()

    def fail_active(self, message: str) -> None:
        self.scheduler.fail_active(message)

    def counts(self) -> tuple[int, int]:
        return self.scheduler.counts()

    def set_limits(self, limits: Limits) -> None:
        self.scheduler.set_limits(limits)

    def kv_bytes(self) -> tuple[int, int, int]:
        return self.scheduler.kv_bytes()

    def prefill_rate(self) -> float:
        return self.scheduler.prefill_rate()

    def generation_stream(self) -> mx.Stream | None:
        return self.scheduler.generation_stream()

    def step_label(self) -> str:
        return self.scheduler.step_label()

    def runs_interactive(self) -> bool:
        return self.scheduler.runs_interactive()

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
        scheduler = self.scheduler
        if scheduler.knows(request.request_id):
            log.warning("duplicate request_id %s ignored", request.request_id)
            return
        params = request.sampling
        check_sampling(params)
        assert self.adapters is not None
        adapters = self.adapters.ids(request.adapters)
        self._refuse_unfittable(request, params.max_tokens)
        prompt, where = self._prompt_tokens(request)
        max_tokens = self._max_tokens(len(prompt), params.max_tokens, where, params.fit_max_tokens)
        admission = scheduler.kv_admission
        max_tokens = admission.admit(len(prompt), max_tokens, params.max_tokens is not None)
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
            kv_reserved=admission.bytes_for(len(prompt) + max_tokens),
            adapters=adapters,
            batch=request.priority == BATCH,
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
        # What the prompt cache holds for it now (the hit itself comes when its
        # prefill starts, and the Done's usage counts it): the gateway tells clients
        # before the first token (Anthropic's message_start, cache diagnostics).
        cached = self.prompt_cache.reusable(token_bytes(prompt), active.space)
        scheduler.add(active)
        self._emit(
            Started(
                request_id=active.request_id,
                prompt_tokens=len(prompt),
                cached_tokens=cached,
                reasoning=reasoning,
            )
        )

    def _adapter_request(self, request: MountAdapter | UnmountAdapter) -> None:
        """Mount or unmount an adapter between two steps; answered at once."""
        assert self.adapters is not None
        users = self.scheduler.adapter_users(request.adapter_id)
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
