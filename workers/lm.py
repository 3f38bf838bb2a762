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

import contextlib
import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
from mlx_lm import load as load_model_and_tokenizer
from mlx_lm.generate import BatchGenerator
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.tokenizer_utils import TokenizerWrapper

from mlx_gateway.protocol.messages import (
    Chunk,
    CountTokens,
    Done,
    Generate,
    Limits,
    ModelFacts,
    MountAdapter,
    Prefilled,
    Progress,
    Request,
    Started,
    UnmountAdapter,
    Usage,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers import system_turns
from mlx_gateway.workers.adapters import Adapters, read_adapter
from mlx_gateway.workers.base import Emit, RequestError
from mlx_gateway.workers.batch_requests import (
    Active,
    BatchRequests,
    check_sampling,
    completion_budget,
    overflow_message,
)
from mlx_gateway.workers.blas import blas_in_use
from mlx_gateway.workers.chat_format import opens_thinking, template_facts
from mlx_gateway.workers.coalesce import Coalescer, interval_option
from mlx_gateway.workers.disk_cache import DiskCache, model_key
from mlx_gateway.workers.grammar import Grammars
from mlx_gateway.workers.hub import LoadError, resolve_model_path
from mlx_gateway.workers.kv import KvAdmission, KvSettings, cache_bytes
from mlx_gateway.workers.logprobs import LogprobTrack
from mlx_gateway.workers.prefill_pace import PrefillPace
from mlx_gateway.workers.prompt_cache import Hit, PromptCache
from mlx_gateway.workers.sampling import (
    LogitsProcessor,
    Sampler,
    make_request_processors,
    make_request_sampler,
)
from mlx_gateway.workers.solo import SoloDecode, private_copy, supports_solo
from mlx_gateway.workers.speculative import DRAFT_TOKENS, Draft, SpeculativeDecode, load_draft
from mlx_gateway.workers.thinking_budget import make_thinking_budget
from mlx_gateway.workers.tool_prompt import ToolPrompt, probe_tool_prompt
from mlx_gateway.workers.tool_scan import ToolScan, make_tool_scan

log = logging.getLogger(__name__)

PROMPT_CACHE_BYTES = 512 * 1024**2
PROMPT_CACHE_ENTRIES = 32
"""Prompt cache caps when the spec's options leave them out."""
_UNBOUNDED = 10**7  # tokenizers without a limit report model_max_length ≈ 1e30
_TEMPLATE_RESERVED = {
    "conversation",
    "messages",
    "tokenize",
    "add_generation_prompt",
    "return_dict",
}


@dataclass(kw_only=True)
class _Active(Active):
    """One accepted request and its streaming state (``cached``: prompt tokens
    taken from the prompt cache)."""

    prompt: list[int]
    sampler: Sampler
    processors: list[LogitsProcessor]
    logprobs: LogprobTrack | None = None
    """Set when the request asked for log-probabilities."""
    tools: ToolScan | None = None
    """Set when the request asked for the tokenizer's own tool-call parsing."""
    solo: SoloDecode | None = None
    """Set while the request decodes alone, outside the batch."""
    kv_reserved: int = 0
    """KV cache bytes its prompt and completion budget may take (admission)."""
    decoding: bool = False
    """The batch finished its prompt (it no longer takes prefill slices)."""
    draft_proposed: int = 0
    draft_accepted: int = 0
    """Tokens the draft model proposed for it, and those taken (speculative decoding)."""
    adapters: tuple[str, ...] = ()
    """The LoRA adapters it runs with (see :mod:`.adapters`); empty: the base model."""

    @property
    def space(self) -> str:
        """Its prompt-cache space: caches never cross adapter sets."""
        return "+".join(self.adapters)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt)


def create_backend() -> LmBackend:
    return LmBackend()


class LmBackend(BatchRequests[_Active, BatchGenerator]):
    """The ``lm`` backend (see the module docstring for the reply sequence)."""

    def __init__(self) -> None:
        super().__init__()
        self.model: Any = None
        self.tokenizer: TokenizerWrapper | None = None
        self.context_length: int | None = None
        self._spec: WorkerSpec | None = None
        self._stream: mx.Stream | None = None
        self.prompt_cache = PromptCache(0, 0)
        self.grammars: Grammars | None = None
        self.solo_enabled = False
        """Whether a request that runs alone decodes outside the batch (see :mod:`.solo`)."""
        self._solo: _Active | None = None
        self.tool_prompt = ToolPrompt()
        """Whether the chat template renders tools (else the worker does; see
        :mod:`.tool_prompt`), found once at load."""
        self.pace = PrefillPace(2048)
        """Sizes the prefill slices (see :mod:`.prefill_pace`)."""
        self.draft: Draft | None = None
        """The draft model solo requests decode with (see :mod:`.speculative`)."""
        self.adapters: Adapters | None = None
        """The LoRA adapters mounted on the model (see :mod:`.adapters`)."""

    # ------------------------------------------------------------ loading

    def load(self, spec: WorkerSpec, emit: Emit) -> ModelFacts:
        self._spec = spec
        self._emit = emit

        def downloading(repo: str) -> None:
            emit(Progress(stage="download", detail=repo))

        path = resolve_model_path(spec.model_path, on_download=downloading)
        tokenizer_config: dict[str, Any] = {}
        if spec.chat_template_file:
            tokenizer_config["chat_template"] = _read_template(spec.chat_template_file)
        emit(Progress(stage="load", detail=str(path)))
        parallel = spec.options.get("distributed")
        if parallel:
            model, tokenizer, config = _sharded(str(path), parallel, tokenizer_config, spec)
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
        self.kv = KvSettings.from_spec(spec)
        self.kv.check_model(config)
        self.kv_admission = KvAdmission.for_model(config, spec)
        self.context_length = spec.context_length or _context_length(config, tokenizer)
        # Made here, on the MLX thread: a stream belongs to the thread that made it
        # (mlx-lm's module-level generation_stream belongs to whoever imported it).
        self._stream = mx.new_stream(mx.default_device())
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
        cache_bytes = _option_int(spec, "prompt_cache_bytes", PROMPT_CACHE_BYTES)
        if parallel == "pipeline" and cache_bytes:
            # Each rank holds other layers, so the same cache takes other bytes on
            # each, and a byte bound would evict different entries on different
            # ranks (then their prefills differ and the group falls out of step).
            log.info("prompt cache off: pipeline ranks cannot agree on its bytes")
            cache_bytes = 0
        self.prompt_cache = PromptCache(
            cache_bytes, _option_int(spec, "prompt_cache_entries", PROMPT_CACHE_ENTRIES)
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
                    _option_int(spec, "prompt_cache_disk_bytes", 0),
                    _option_int(spec, "prompt_cache_dir_bytes", 0) or None,
                )

            self.prompt_cache.disk = disk_tier("")
            self.prompt_cache.space_disk = lambda space: disk_tier(adapters.identity(space))
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
            _option_int(spec, "num_draft_tokens", DRAFT_TOKENS),
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

    def _new_generator(self) -> BatchGenerator:
        spec = self._spec
        assert spec is not None and self.tokenizer is not None
        concurrency = max(spec.max_concurrency, 1)
        return BatchGenerator(
            self.model,
            stop_tokens=[[t] for t in sorted(self.tokenizer.eos_token_ids)],
            completion_batch_size=concurrency,
            prefill_batch_size=max(min(spec.prefill_batch_size, concurrency), 1),
            prefill_step_size=spec.prefill_step_size,
            stream=self._stream,
            max_kv_size=self.kv.max_size,
        )

    # ------------------------------------------------------------ requests

    def submit(self, request: Request, payloads: Sequence[bytes]) -> None:
        if isinstance(request, CountTokens):
            self._count(request)
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
        adapters = self._adapter_ids(request.adapters)
        prompt, where = self._prompt_tokens(request)
        max_tokens = self._max_tokens(len(prompt), params.max_tokens, where)
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
        active = _Active(
            request_id=request.request_id,
            prompt=prompt,
            max_tokens=max_tokens,
            sampler=make_request_sampler(params),
            processors=processors,
            stops=[s for s in params.stop if s],
            detokenizer=self.tokenizer.detokenizer,
            kv_reserved=self.kv_admission.bytes_for(len(prompt) + max_tokens),
            adapters=adapters,
        )
        if request.logprobs is not None:
            active.logprobs = LogprobTrack(self.tokenizer, request.logprobs)
        if request.parse_tools:
            active.tools = make_tool_scan(self.tokenizer, request.chat_template_kwargs.get("tools"))
        self._queue.append(active)
        self._by_id[active.request_id] = active
        self._emit(
            Started(
                request_id=active.request_id,
                prompt_tokens=len(prompt),
                reasoning=reasoning,
            )
        )

    def _adapter_ids(self, requested: list[str]) -> tuple[str, ...]:
        """The adapters a request names, each mounted, in order, once."""
        assert self.adapters is not None
        ids = tuple(dict.fromkeys(requested))
        unknown = [i for i in ids if i not in self.adapters.mounted]
        if unknown:
            mounted = ", ".join(sorted(self.adapters.mounted)) or "none"
            raise RequestError(
                f"adapter {unknown[0]!r} is not mounted on this model (mounted: {mounted})",
                param="adapter",
            )
        return ids

    def _adapter_request(self, request: MountAdapter | UnmountAdapter) -> None:
        """Mount or unmount an adapter between two steps; answered at once."""
        assert self.adapters is not None
        if isinstance(request, MountAdapter):
            if any(request.adapter_id in a.adapters for a in self._by_id.values()):
                raise RequestError(
                    f"adapter {request.adapter_id!r} is in use by running or waiting "
                    "requests; mount the new one under another id, or retry when they end",
                    status=409,
                    type="conflict",
                )
            self.adapters.mount(read_adapter(request.adapter_id, request.path))
            self._forget_caches_of(request.adapter_id)  # a replaced one's are stale
            finish = "mounted"
        else:
            if request.adapter_id not in self.adapters.mounted:
                mounted = ", ".join(sorted(self.adapters.mounted)) or "none"
                raise RequestError(
                    f"adapter {request.adapter_id!r} is not mounted (mounted: {mounted})",
                    status=404,
                    type="not_found_error",
                )
            users = sum(request.adapter_id in a.adapters for a in self._by_id.values())
            if users:
                raise RequestError(
                    f"adapter {request.adapter_id!r} is in use by {users} running or waiting "
                    "request(s); retry when they end",
                    status=409,
                    type="conflict",
                )
            self.adapters.unmount(request.adapter_id)
            self._forget_caches_of(request.adapter_id)
            finish = "unmounted"
        log.info("%s adapter %s", finish, request.adapter_id)
        self._emit(Done(request_id=request.request_id, finish_reason=finish))

    def _forget_caches_of(self, adapter_id: str) -> None:
        for space in self.prompt_cache.spaces():
            if adapter_id in space.split("+"):
                self.prompt_cache.forget(space)

    def _count(self, request: CountTokens) -> None:
        """Answer a :class:`CountTokens` at once: one ``Done`` carrying the count."""
        as_generate = Generate(
            request_id=request.request_id,
            messages=request.messages,
            prompt=request.prompt,
            chat_template_kwargs=request.chat_template_kwargs,
        )
        prompt, _ = self._prompt_tokens(as_generate)
        usage = Usage(prompt_tokens=len(prompt))
        self._emit(Done(request_id=request.request_id, finish_reason="counted", usage=usage))

    def _prompt_tokens(self, request: Generate) -> tuple[list[int], str]:
        """The prompt as token ids, and the field it came from (for error params)."""
        tokenizer = self.tokenizer
        assert tokenizer is not None
        if request.messages is not None:
            tokens = _chat_tokens(
                tokenizer, request.messages, request.chat_template_kwargs, self.tool_prompt
            )
            where = "messages"
        elif isinstance(request.prompt, str):
            bos = tokenizer.bos_token
            add_special = bos is None or not request.prompt.startswith(bos)
            tokens = tokenizer.encode(request.prompt, add_special_tokens=add_special)
            where = "prompt"
        elif isinstance(request.prompt, list):
            vocab = len(tokenizer)
            bad = next((t for t in request.prompt if not 0 <= t < vocab), None)
            if bad is not None:
                raise RequestError(
                    f"token id {bad} in the prompt is outside the vocabulary (0..{vocab - 1})",
                    param="prompt",
                )
            tokens = list(request.prompt)
            where = "prompt"
        else:
            raise RequestError("either messages or prompt is required", param="messages")
        if not tokens:
            raise RequestError(f"the {where} is empty", param=where)
        return tokens, where

    def _max_tokens(self, prompt_tokens: int, max_tokens: int | None, where: str) -> int:
        """The completion budget; raises the OpenAI context_length_exceeded error."""

        def too_long(limit: int) -> str:
            if max_tokens is not None:
                return overflow_message(limit, prompt_tokens, max_tokens, where)
            return (
                f"This model's maximum context length is {limit} tokens. However, your "
                f"{where} resulted in {prompt_tokens} tokens. Please reduce the length "
                f"of the {where}."
            )

        return completion_budget(self.context_length, prompt_tokens, max_tokens, where, too_long)

    def _queued(self, active: _Active) -> bool:
        return active.uid is None and active.solo is None

    def counts(self) -> tuple[int, int]:
        return len(self._by_uid) + (self._solo is not None), len(self._queue)

    def set_limits(self, limits: Limits) -> None:
        """The gateway says how much KV cache the budget leaves this model now."""
        self.kv_admission = dataclasses.replace(self.kv_admission, free=max(limits.kv_free, 0))

    def kv_bytes(self) -> tuple[int, int, int]:
        """Bytes of KV cache held by the running requests and by the prompt cache,
        and the limit requests are admitted against (0: none).

        Read from the worker's main thread for heartbeats: array sizes only (no
        evaluation); a figure read while a step replaces a cache may be a step old."""
        active = 0
        solo = self._solo
        if solo is not None and solo.solo is not None:
            active += cache_bytes(solo.solo.cache)
            if isinstance(solo.solo, SpeculativeDecode):
                active += cache_bytes(solo.solo.draft_cache)
        generator = self._generator
        for part in ("_generation_batch", "_prompt_batch"):  # mlx-lm's own batches
            batch = getattr(generator, part, None)
            with contextlib.suppress(NotImplementedError, AttributeError, TypeError):
                active += cache_bytes(getattr(batch, "prompt_cache", None))
        kept = self.prompt_cache.nbytes if self.prompt_cache is not None else 0
        admission = self.kv_admission
        limits = [x for x in (admission.budget, admission.free) if x is not None]
        return active, kept, min(limits) if limits else 0

    # ------------------------------------------------------------ generation

    def step(self) -> None:
        generator = self._generator
        assert generator is not None
        if self._admit(generator):
            self._out.flush()  # the step that prefills them may be long
        if self._solo is not None:
            self._solo_step(self._solo)
            return
        if not self._by_uid:
            return
        prefilling = sum(1 for a in self._by_uid.values() if not a.decoding)
        if prefilling:
            rows = min(prefilling, generator.prefill_batch_size)
            generator.prefill_step_size = self.pace.slice(rows)
            with generator.stats() as stats:  # its prompt time leaves the decoding out
                prompts, responses = generator.next()
            self._prefill_progress(prompts)
            self.pace.done(stats.prompt_tokens, stats.prompt_time)
        else:
            _, responses = generator.next()
        chunks: list[Chunk] = []
        finished: list[_Active] = []
        for response in responses:
            active = self._by_uid.get(response.uid)
            if active is None:
                continue
            chunk = self._advance(active, response.token, response.finish_reason, response.logprobs)
            if chunk is not None:
                chunks.append(chunk)
            if active.finish is not None:
                finished.append(active)
                if response.finish_reason is not None and response.prompt_cache:
                    self._keep_cache(active, response.all_tokens, response.prompt_cache)
        self._out.add(chunks)
        for active in finished:
            self._finish(active, active.finish or "stop")

    def _prefill_progress(self, prompts: list[Any]) -> None:
        """Report long prompts' progress (``prompts``: the generator's prompt
        responses of a step) and note the prompts it finished."""
        for response in prompts:
            active = self._by_uid.get(response.uid)
            if active is None:
                continue
            done, total = response.progress
            if response.end_of_prompt:
                active.decoding = True
            elif not response.end_of_segment:  # more slices follow
                in_cache = active.prompt_tokens - (total - done)
                self._emit(Prefilled(active.request_id, in_cache, active.prompt_tokens))

    def _solo_step(self, active: _Active) -> None:
        solo = active.solo
        assert solo is not None
        if solo.prefilling and solo.unread > 1:
            solo.step_size = self.pace.slice()
            before, started = solo.unread, time.perf_counter()
            solo.step()  # prefills one slice of the prompt
            self.pace.done(before - solo.unread, time.perf_counter() - started)
            if solo.unread > 1:
                in_cache = active.prompt_tokens - solo.unread
                self._emit(Prefilled(active.request_id, in_cache, active.prompt_tokens))
            return
        taken = solo.step()
        if taken is None:
            return
        token, logprobs = taken
        chunk = self._advance(active, token, self._solo_finish(active, token), logprobs)
        if chunk is not None:
            self._out.add([chunk])
        if active.finish is not None:
            if active.solo is not None:  # not stopped by a stop string (that kept it)
                self._keep_cache(active, *active.solo.finished_cache())
                self._drop_solo(active)
            self._finish(active, active.finish)

    def _solo_finish(self, active: _Active, token: int) -> str | None:
        """The finish a batch would report for this token (EOS wins over the budget)."""
        assert self.tokenizer is not None
        if token in self.tokenizer.eos_token_ids:
            return "stop"
        if active.generated + 1 >= active.max_tokens:
            return "length"
        return None

    def _admit(self, generator: BatchGenerator) -> bool:
        """Start queued requests while there is room; True if any started."""
        assert self._spec is not None
        running = len(self._by_uid) + (self._solo is not None)
        if not self._queue or running >= max(self._spec.max_concurrency, 1):
            return False
        group = self._queue[0].adapters
        if not self._group_turn(group, running):
            return False  # the head of the queue waits for the running group to end
        if self._solo is not None and not self._join_batch(self._solo, generator):
            return True  # the solo request ended with the token it had sampled
        if self.solo_enabled and not self._by_uid and len(self._queue) == 1:
            self._start_solo(self._queue.popleft())
            return True
        while (
            self._queue
            and len(self._by_uid) < max(self._spec.max_concurrency, 1)
            and self._queue[0].adapters == group
        ):
            reserved = sum(a.kv_reserved for a in self._by_uid.values())
            if self._by_uid and not self.kv_admission.fits_beside(
                reserved, self._queue[0].kv_reserved
            ):
                break  # it waits until running requests free their KV cache
            active = self._queue.popleft()
            hit = self._cached(active)
            if hit is None:
                (uid,) = generator.insert(
                    [active.prompt],
                    max_tokens=[active.max_tokens],
                    samplers=[active.sampler],
                    logits_processors=[active.processors],
                )
            else:
                active.cached = hit.tokens
                # all_tokens: what the cache holds, so logits processors see the
                # whole context (the penalties count from len(prompt) on).
                (uid,) = generator.insert(
                    [active.prompt[hit.tokens :]],
                    max_tokens=[active.max_tokens],
                    caches=[hit.cache],
                    all_tokens=[active.prompt[: hit.tokens]],
                    samplers=[active.sampler],
                    logits_processors=[active.processors],
                )
            active.uid, active.decoding = uid, False
            self._by_uid[uid] = active
        return True

    def _group_turn(self, group: tuple[str, ...], running: int) -> bool:
        """Whether requests of the adapter set ``group`` may start now. All running
        requests share one set (one step runs one set of weights): a request of
        another set waits until they end, then the model switches to its set and
        the queue goes on in order (later requests of the running set do not pass it)."""
        assert self.adapters is not None
        if group == self.adapters.active:
            return True
        if running:
            return False
        self.adapters.activate(group)
        return True

    def _cached(self, active: _Active) -> Hit | None:
        if not self.prompt_cache.enabled:
            return None
        return self.prompt_cache.fetch(active.prompt, active.space)

    def _start_solo(self, active: _Active) -> None:
        assert self._spec is not None and self._stream is not None
        hit = self._cached(active)
        if hit is None:
            cache, cached = make_prompt_cache(self.model), 0
        else:
            cache, cached = private_copy(hit.cache, hit.tokens), hit.tokens
        active.cached = cached
        if self.draft is not None and not active.processors:
            active.solo = SpeculativeDecode(
                self.model,
                self._stream,
                cache,
                cached=active.prompt[:cached],
                prompt=active.prompt[cached:],
                sampler=active.sampler,
                prefill_step_size=self._spec.prefill_step_size,
                draft=self.draft,
                budget=active.max_tokens,
            )
            self._solo = active
            return
        active.solo = SoloDecode(
            self.model,
            self._stream,
            cache,
            cached=active.prompt[:cached],
            prompt=active.prompt[cached:],
            sampler=active.sampler,
            processors=active.processors,
            prefill_step_size=self._spec.prefill_step_size,
            quantize=self.kv.quantize if self.kv.bits is not None else None,
        )
        self._solo = active

    def _join_batch(self, active: _Active, generator: BatchGenerator) -> bool:
        """Move the solo request into the batch (another request is waiting). False
        when the token it had already sampled ended it."""
        assert active.solo is not None
        handover, sampled = active.solo.handover()
        self._solo = None
        if sampled is not None:
            token, logprobs = sampled
            chunk = self._advance(active, token, self._solo_finish(active, token), logprobs)
            if chunk is not None:
                self._out.add([chunk])
            if active.finish is not None:
                if active.solo is not None:
                    self._keep_cache(active, *active.solo.finished_cache())
                    self._drop_solo(active)
                self._finish(active, active.finish)
                return False
        self._drop_solo(active)
        (uid,) = generator.insert(
            [handover.prompt],
            max_tokens=[active.max_tokens - active.generated],
            caches=[handover.cache],
            all_tokens=[handover.cached],
            samplers=[active.sampler],
            logits_processors=[active.processors],
        )
        active.uid, active.decoding = uid, False
        self._by_uid[uid] = active
        return True

    def _advance(
        self, active: _Active, token: int, finish: str | None, logprobs: mx.array | None = None
    ) -> Chunk | None:
        """Take one generated token: detokenize, apply stop strings, decide the finish."""
        segment = self._take_token(active, token, finish)
        if active.logprobs is not None:  # EOS (finish "stop" here) is not reported
            eos = finish == "stop"
            active.logprobs.add(None if eos else token, None if eos else logprobs, segment)
        text = self._apply_stops(active, segment, finish)
        finish = active.finish
        logprobs_out = []
        if active.logprobs is not None:
            logprobs_out = active.logprobs.release(len(text), final=finish is not None)
        calls: list[tuple[str, str]] = []
        if active.tools is not None:
            final = finish is not None
            text, calls = active.tools.feed(text, final=final, cut=finish == "length")
        if not text and not logprobs_out and not calls:
            return None
        chunk = Chunk(request_id=active.request_id, text=text, tokens=active.unsent_tokens)
        chunk.logprobs, chunk.tool_calls = logprobs_out, calls
        active.unsent_tokens = 0
        return chunk

    def _leave_batch(self, active: _Active) -> None:
        """Take a running request out of the batch (or stop its solo decoding),
        keeping its KV cache."""
        if active.solo is not None:
            self._keep_cache(active, *active.solo.finished_cache())
            self._drop_solo(active)
            self._solo = None
            return
        assert self._generator is not None and active.uid is not None
        if not self.prompt_cache.enabled:
            self._generator.remove([active.uid])
            return
        caches = self._generator.remove([active.uid], return_prompt_caches=True)
        cache, tokens = caches.get(active.uid, (None, None))
        if cache and tokens is not None:
            self._keep_cache(active, tokens, cache)

    def _drop_solo(self, active: _Active) -> None:
        """End the request's solo decoding, keeping its draft model's counts."""
        solo = active.solo
        if isinstance(solo, SpeculativeDecode):
            active.draft_proposed += solo.proposed
            active.draft_accepted += solo.accepted
            log.debug(
                "%s: the draft model proposed %d tokens, %d taken",
                active.request_id,
                solo.proposed,
                solo.accepted,
            )
        active.solo = None

    def _usage(self, active: _Active) -> Usage:
        usage = super()._usage(active)
        usage.draft_proposed, usage.draft_accepted = active.draft_proposed, active.draft_accepted
        return usage

    def _keep_cache(self, active: _Active, tokens: list[int], cache: list[Any]) -> None:
        # A request cancelled before its prefill started holds only the cache it
        # was given: nothing new to keep.
        if len(tokens) > active.cached:
            self.prompt_cache.store(list(tokens), cache, active.space)

    def _finish(self, active: _Active, reason: str) -> None:
        if self._solo is active:
            self._solo = None
        super()._finish(active, reason)

    def fail_active(self, message: str) -> None:
        if self._solo is not None:
            self._solo.solo = None
            self._solo = None
        super().fail_active(message)


# ---------------------------------------------------------------- helpers


def kv_option_names(spec: WorkerSpec) -> list[str]:
    """The options that change what a KV cache holds (part of the disk tier's key)."""
    names = ("kv_bits", "kv_group_size", "quantized_kv_start", "max_kv_size")
    return [name for name in names if name in spec.options]


def _option_int(spec: WorkerSpec, key: str, default: int) -> int:
    value = spec.options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise LoadError(f"option {key} must be a whole number ≥ 0, got {value!r}")
    return value


def _read_template(path: str) -> str:
    try:
        return Path(path).expanduser().read_text()
    except OSError as exc:
        raise LoadError(f"chat_template_file '{path}' cannot be read: {exc.strerror}") from None


def _context_length(config: dict[str, Any], tokenizer: TokenizerWrapper) -> int | None:
    for source in (config, config.get("text_config") or {}):
        value = source.get("max_position_embeddings")
        if isinstance(value, int) and value > 0:
            return value
    value = getattr(tokenizer, "model_max_length", None)
    if isinstance(value, int) and 0 < value < _UNBOUNDED:
        return value
    return None


def _flatten_content(message: dict[str, Any]) -> dict[str, Any]:
    """Text parts joined (as mlx-lm's server does); other parts are refused."""
    content = message.get("content")
    if content is None:
        return {**message, "content": ""}
    if not isinstance(content, list):
        return message
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text":
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise RequestError(
                f"this model accepts only text content, not '{kind}'", param="messages"
            )
        texts.append(str(part.get("text", "")))
    return {**message, "content": "".join(texts)}


def _chat_tokens(
    tokenizer: TokenizerWrapper,
    messages: list[dict[str, Any]],
    kwargs: dict[str, Any],
    tool_prompt: ToolPrompt,
) -> list[int]:
    if not tokenizer.has_chat_template:
        raise RequestError(
            "this model has no chat template; use the completions API or set "
            "chat_template_file for it",
            param="messages",
        )
    flat = [_flatten_content(m) for m in messages]
    extra = {k: v for k, v in kwargs.items() if k not in _TEMPLATE_RESERVED}
    if tool_prompt.fallback and extra.get("tools"):
        tools = extra.pop("tools")
        flat = tool_prompt.messages(flat, tools if isinstance(tools, list) else [tools])

    def render(conversation: list[dict[str, Any]]) -> str:
        return str(
            tokenizer.apply_chat_template(
                conversation, add_generation_prompt=True, tokenize=False, **extra
            )
        )

    flat = system_turns.for_template(flat, render)
    try:
        tokens = tokenizer.apply_chat_template(flat, add_generation_prompt=True, **extra)
    except Exception as exc:
        # Jinja templates reject conversations with raise_exception(…): a client error.
        raise RequestError(
            f"the chat template rejected the messages: {exc}", param="messages"
        ) from None
    return list(tokens)


def _sharded(
    path: str, parallel: str, tokenizer_config: dict[str, Any], spec: WorkerSpec
) -> tuple[Any, Any, dict[str, Any]]:
    """This rank's shard of the model (mlx-lm's ``sharded_load``), over the group
    ``mlx.launch`` set up: every layer split across the ranks (``tensor``) or
    consecutive layers per rank (``pipeline``). Every rank draws the same random
    numbers, so sampled tokens agree across the group."""
    from mlx_lm.utils import sharded_load

    group = mx.distributed.init()
    mx.random.seed(0)
    try:
        loaded = sharded_load(
            path,
            pipeline_group=group if parallel == "pipeline" else None,
            tensor_group=group if parallel == "tensor" else None,
            return_config=True,
            tokenizer_config={"trust_remote_code": spec.trust_remote_code, **tokenizer_config},
            trust_remote_code=spec.trust_remote_code,
        )
    except ValueError as exc:  # the model cannot be split that way
        raise LoadError(f"cannot shard {path} ({parallel} parallel): {exc}") from None
    return cast(tuple[Any, Any, dict[str, Any]], loaded)
