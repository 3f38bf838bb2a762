"""The lm worker's scheduling: which request runs, alone or in the batch, step by step.

A request that runs alone decodes outside the batch (:mod:`.solo`, or :mod:`.speculative`
with a draft model), and moves into the shared ``BatchGenerator``, cache and all, as
soon as another request arrives. Requests are admitted in arrival order (interactive
ahead of ``batch``, whose prefill yields to theirs: :mod:`.yielding`), grouped by
adapter set, against the KV cache the budget leaves (:mod:`..common.kv`); long prompts
are read in slices sized by :mod:`.prefill_pace` (bounded in time beside a person's
answer: :mod:`.fair_share`), with ``Prefilled`` progress; a
request whose prefix another is prefilling waits for it (:mod:`.shared_prefix`). A
request's state is an :class:`~.active.LmActive`. The :class:`Scheduler` is made at
load by :mod:`.backend`, which checks each request and hands it over; it owns the
request maps, the generator, the solo request and the prefill pace, and is given
what it needs of the model (its prompt cache and adapters, shared with the backend).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Set as AbstractSet
from typing import Any

import mlx.core as mx
from mlx_lm.generate import BatchGenerator
from mlx_lm.models.cache import make_prompt_cache

from mlx_gateway.protocol.messages import (
    Chunk,
    Limits,
    Prefilled,
    Usage,
)
from mlx_gateway.workers.common.batch_requests import (
    BatchRequests,
)
from mlx_gateway.workers.common.coalesce import Coalescer
from mlx_gateway.workers.common.kv import KvAdmission, KvSettings, batch_cache_bytes
from mlx_gateway.workers.lm import checkpoints as cp
from mlx_gateway.workers.lm import prefill, yielding
from mlx_gateway.workers.lm.active import LmActive, drop_solo, step_label
from mlx_gateway.workers.lm.adapters import Adapters
from mlx_gateway.workers.lm.fair_share import FairShare
from mlx_gateway.workers.lm.prefill_pace import PrefillPace
from mlx_gateway.workers.lm.prompt_cache import Hit, PromptCache
from mlx_gateway.workers.lm.shared_prefix import awaits_prefix
from mlx_gateway.workers.lm.solo import decode_alone, private_copy
from mlx_gateway.workers.lm.speculative import Draft
from mlx_gateway.workers.runtime.contract import Emit

log = logging.getLogger(__name__)


class Scheduler(BatchRequests[LmActive, BatchGenerator]):
    """Which request runs, and the step loop, for one loaded model (made by
    :meth:`.backend.LmBackend.load`, which checks requests and hands them over by
    :meth:`add`). ``eos_token_ids``: the tokenizer's own set; ``concurrency``: most
    requests running at once; ``prefill_batch_size``: most prompts prefilled in one
    step (1 for a model mlx-lm pads wrong, :mod:`.ssm_lengths`); ``stream_interval``:
    the coalescer's (:mod:`..common.coalesce`); ``linger``: the model's
    ``batch_slice_linger`` (:mod:`.fair_share`)."""

    def __init__(
        self,
        model: Any,
        eos_token_ids: AbstractSet[int],
        *,
        emit: Emit,
        stream: mx.Stream,
        concurrency: int,
        prefill_batch_size: int,
        prefill_step_size: int,
        kv: KvSettings,
        kv_admission: KvAdmission,
        prompt_cache: PromptCache,
        adapters: Adapters,
        draft: Draft | None,
        solo: bool,
        cuts: bool,
        checkpoint_every: int,
        stream_interval: float,
        linger: float,
    ) -> None:
        super().__init__()
        self.model = model
        self._eos = eos_token_ids
        self._emit = emit
        self._stream = stream
        self._concurrency = concurrency
        self._prefill_batch_size = prefill_batch_size
        self._prefill_step_size = prefill_step_size
        self.kv = kv
        self.kv_admission = kv_admission
        """Admission by KV cache bytes; :meth:`set_limits` updates what is free."""
        self.prompt_cache = prompt_cache
        self.adapters = adapters
        """The LoRA adapters mounted on the model (see :mod:`.adapters`)."""
        self.draft = draft
        """The draft model solo requests decode with (see :mod:`.speculative`)."""
        self.solo_enabled = solo
        """Whether a request that runs alone decodes outside the batch (see :mod:`.solo`)."""
        self.cuts = cuts
        """The model's cache can be cut at any prefix (every layer a plain KV cache)."""
        self.checkpoint_every = checkpoint_every
        """Tokens between two interval checkpoints of a long prefill (see :mod:`.checkpoints`)."""
        self.pace = PrefillPace(prefill_step_size)
        """Sizes the prefill slices (see :mod:`.prefill_pace`)."""
        self.fair = FairShare(self.pace, linger=linger)
        """Bounds batch slices beside a person's answer (see :mod:`.fair_share`)."""
        self._solo: LmActive | None = None
        self._out = Coalescer(self._emit_batch, stream_interval)
        self._generator = self._new_generator()

    def _new_generator(self) -> BatchGenerator:
        return BatchGenerator(
            self.model,
            stop_tokens=[[t] for t in sorted(self._eos)],
            completion_batch_size=self._concurrency,
            prefill_batch_size=self._prefill_batch_size,
            prefill_step_size=self._prefill_step_size,
            stream=self._stream,
            max_kv_size=self.kv.max_size,
        )

    # ------------------------------------------------------------ requests

    def knows(self, request_id: str) -> bool:
        """Whether ``request_id`` is queued or running."""
        return request_id in self._by_id

    def add(self, active: LmActive) -> None:
        """Queue an accepted request (it starts when :meth:`step` admits it)."""
        self._enqueue(active)

    def adapter_users(self, adapter_id: str) -> int:
        """Queued and running requests that name the adapter ``adapter_id``."""
        return sum(adapter_id in a.adapters for a in self._by_id.values())

    def step_label(self) -> str:
        """``prefill of 4096 tokens``, ``decode of 2 requests``, or both."""
        return step_label(list(self._by_id.values()))

    def _queued(self, active: LmActive) -> bool:
        return active.uid is None and active.solo is None

    def counts(self) -> tuple[int, int]:
        return len(self._by_uid) + (self._solo is not None), len(self._queue)

    def prefill_rate(self) -> float:
        return self.pace.tokens_per_second()

    def generation_stream(self) -> mx.Stream | None:
        return self._stream

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
            active += solo.solo.nbytes()
        active += batch_cache_bytes(self._generator)
        kept = self.prompt_cache.nbytes
        admission = self.kv_admission
        limits = [x for x in (admission.budget, admission.free) if x is not None]
        return active, kept, min(limits) if limits else 0

    # ------------------------------------------------------------ generation

    def step(self) -> None:
        generator = self._generator
        assert generator is not None
        self._yield_prefills(generator)
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
            size = self.fair.slice(rows, self._by_uid.values())
            generator.prefill_step_size = size  # 0: the batch decodes, no prompt is read
            with generator.stats() as stats:  # its prompt time leaves the decoding out
                prompts, responses = generator.next()
            cache, by_uid = self.prompt_cache, self._by_uid
            prefill.progress(prompts, by_uid, generator, self._emit, self.cuts, cache, size > 0)
            self.fair.done(stats.prompt_tokens, stats.prompt_time)
        else:
            _, responses = generator.next()
        chunks: list[Chunk] = []
        finished: list[LmActive] = []
        for response in responses:
            active = self._by_uid.get(response.uid)
            if active is None:
                continue
            if active.plain and response.finish_reason is None:
                self._take_plain(active, response.token)
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

    def _solo_step(self, active: LmActive) -> None:
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

    def _solo_finish(self, active: LmActive, token: int) -> str | None:
        """The finish a batch would report for this token (EOS wins over the budget)."""
        if token in self._eos:
            return "stop"
        return "length" if active.generated + 1 >= active.max_tokens else None

    def _admit(self, generator: BatchGenerator) -> bool:
        """Start queued requests while there is room; True if any started."""
        running = len(self._by_uid) + (self._solo is not None)
        if not self._queue or running >= self._concurrency:
            return False
        if self._queue[0].batch and yielding.holds_batch(self._running()):
            return False  # an interactive request waits for its first token
        group = self._queue[0].adapters
        if not self._group_turn(group, running):
            return False  # the head of the queue waits for the running group to end
        if self._solo is not None and not self._join_batch(self._solo, generator):
            return True  # the solo request ended with the token it had sampled
        if self.solo_enabled and not self._by_uid and yielding.alone(self._queue):
            self._start_solo(self._queue.popleft())
            return True
        while (
            self._queue
            and len(self._by_uid) < self._concurrency
            and self._queue[0].adapters == group
        ):
            reserved = sum(a.kv_reserved for a in self._by_uid.values())
            if self._by_uid and not self.kv_admission.fits_beside(
                reserved, self._queue[0].kv_reserved
            ):
                break  # it waits until running requests free their KV cache
            if self._awaits_prefix(self._queue[0]):
                break  # another request is prefilling its prefix: it starts from that
            if self._queue[0].batch and yielding.holds_batch(self._by_uid.values()):
                break  # an interactive request reads its prompt first
            active = self._queue.popleft()
            start, cache = self._start_of(active)
            uid = self._insert(generator, active, start, active.max_tokens, cache)
            active.uid, active.decoding = uid, False
            self._by_uid[uid] = active
        return True

    def _start_of(self, active: LmActive) -> tuple[int, list[Any] | None]:
        """Where ``active``'s prefill starts: where it yielded, else a prompt-cache hit."""
        if active.resume is not None:
            (start, cache), active.resume = active.resume, None
            return start, cache
        hit = self._cached(active)
        if hit is None:
            return 0, None
        active.cached, active.checkpoints = hit.tokens, list(hit.checkpoints.values())
        return hit.tokens, hit.cache

    def _running(self) -> list[LmActive]:
        return [*self._by_uid.values(), *([self._solo] if self._solo else [])]

    def _yield_prefills(self, generator: BatchGenerator) -> None:
        """Batch requests still reading their prompt leave for an interactive
        request's prefill, keeping their cache (see :mod:`.yielding`)."""
        for active in yielding.must_yield(self._queue, self._running()):
            if active.solo is not None:
                active.resume = yielding.solo_cache(active.solo)
                self._drop_solo(active)
                self._solo = None
            else:
                assert active.uid is not None
                active.resume = yielding.batch_cache(generator, active.uid)
                del self._by_uid[active.uid]
                active.uid = None
            log.info("%s: its prefill yields to an interactive request", active.request_id)
            yielding.requeue(self._queue, active)

    def _insert(
        self,
        generator: BatchGenerator,
        active: LmActive,
        start: int,
        max_tokens: int,
        cache: list[Any] | None,
    ) -> int:
        """Put ``active`` into the batch, its prompt from ``start`` on (``cache`` holds
        the tokens before), split where checkpoints are taken."""
        active.prefilled = start
        active.marks = {}
        if self.prompt_cache.enabled:
            active.marks = cp.plan(
                start, active.prompt_tokens, active.system_end, self.checkpoint_every, self.cuts
            )
        (uid,) = generator.insert_segments(
            [cp.segments(active.prompt, start, list(active.marks))],
            max_tokens=[max_tokens],
            caches=None if cache is None else [cache],
            all_tokens=[active.prompt[:start]],
            samplers=[active.sampler],
            logits_processors=[active.processors],
        )
        return int(uid)

    def _awaits_prefix(self, waiting: LmActive) -> bool:
        """Whether ``waiting`` waits for a running request's prefill of their shared
        prefix (see :mod:`.shared_prefix`)."""
        cache = self.prompt_cache
        return cache.enabled and awaits_prefix(waiting, self._by_uid.values(), cache)

    def _group_turn(self, group: tuple[str, ...], running: int) -> bool:
        """Whether requests of the adapter set ``group`` may start now. All running
        requests share one set (one step runs one set of weights): a request of
        another set waits until they end, then the model switches to its set and
        the queue goes on in order (later requests of the running set do not pass it)."""
        if group == self.adapters.active:
            return True
        if running:
            return False
        self.adapters.activate(group)
        return True

    def _cached(self, active: LmActive) -> Hit | None:
        if not self.prompt_cache.enabled:
            return None
        return self.prompt_cache.fetch(active.prompt, active.space)

    def _start_solo(self, active: LmActive) -> None:
        start, hit = self._start_of(active)
        cache = make_prompt_cache(self.model) if hit is None else private_copy(hit, start)
        cached = start
        active.solo = decode_alone(
            self.model,
            self._stream,
            cache,
            cached=active.prompt[:cached],
            prompt=active.prompt[cached:],
            sampler=active.sampler,
            processors=active.processors,
            prefill_step_size=self._prefill_step_size,
            draft=self.draft,
            budget=active.max_tokens,
            quantize=self.kv.quantize if self.kv.bits is not None else None,
        )
        self._solo = active

    def _join_batch(self, active: LmActive, generator: BatchGenerator) -> bool:
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
        if active.generated:  # decoding: what is left is the sampled token
            (uid,) = generator.insert(
                [handover.prompt],
                max_tokens=[active.max_tokens - active.generated],
                caches=[handover.cache],
                all_tokens=[handover.cached],
                samplers=[active.sampler],
                logits_processors=[active.processors],
            )
        else:  # prefilling: the rest of its prompt, split at its checkpoints
            uid = self._insert(
                generator, active, len(handover.cached), active.max_tokens, handover.cache
            )
        active.uid, active.decoding = uid, False
        self._by_uid[uid] = active
        return True

    def _advance(
        self, active: LmActive, token: int, finish: str | None, logprobs: mx.array | None = None
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

    def _take_plain(self, active: LmActive, token: int) -> None:
        """:meth:`_advance` for a token that does not end a request without stop
        strings, log-probs or tool parsing: its text goes straight to the coalescer
        (no chunk per token; a step of 32 requests takes 32 of these)."""
        detokenizer = active.detokenizer
        detokenizer.add_token(token)
        active.generated += 1
        text = detokenizer.last_segment
        if text:
            self._out.append(active.request_id, text, active.unsent_tokens + 1)
            active.unsent_tokens = 0
        else:
            active.unsent_tokens += 1

    def _leave_batch(self, active: LmActive) -> None:
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

    def _drop_solo(self, active: LmActive) -> None:
        drop_solo(active)

    def _usage(self, active: LmActive) -> Usage:
        usage = super()._usage(active)
        usage.draft_proposed, usage.draft_accepted = active.draft_proposed, active.draft_accepted
        return usage

    def _keep_cache(self, active: LmActive, tokens: list[int], cache: list[Any]) -> None:
        # A request cancelled before its prefill started holds only the cache it
        # was given: nothing new to keep.
        if len(tokens) > active.cached:
            self.prompt_cache.store(list(tokens), cache, active.space, active.checkpoints)

    def _finish(self, active: LmActive, reason: str) -> None:
        if self._solo is active:
            self._solo = None
        super()._finish(active, reason)

    def fail_active(self, message: str) -> None:
        if self._solo is not None:
            self._solo.solo = None
            self._solo = None
        super().fail_active(message)
