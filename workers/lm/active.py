"""A request in the lm worker: what :mod:`.scheduling` keeps of it from admission to
its ``Done`` (its prompt, sampling, decoding state, adapters and checkpoints)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from mlx_gateway.workers.common.batch_requests import Active
from mlx_gateway.workers.common.sampling import LogitsProcessor, Sampler
from mlx_gateway.workers.lm.checkpoints import Checkpoint
from mlx_gateway.workers.lm.logprobs import LogprobTrack
from mlx_gateway.workers.lm.prompt_cache import token_bytes
from mlx_gateway.workers.lm.solo import SoloDecode, SpeculativeDecode
from mlx_gateway.workers.lm.tool_scan import ToolScan

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class LmActive(Active):
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
    plain: bool = False
    """No stop strings, log-probs or tool parsing (set once these are): the batch
    takes its tokens by :meth:`.scheduling.Scheduler._take_plain`."""
    system_end: int = 0
    """Where its first user turn starts (0: not a chat, or unknown)."""
    marks: dict[int, str] = dataclasses.field(default_factory=dict)
    """Prompt positions still to be reached where a checkpoint is taken."""
    checkpoints: list[Checkpoint] = dataclasses.field(default_factory=list)
    """Checkpoints of its cache: inherited from the entry it started from, and taken."""
    prefilled: int = 0
    """Prompt tokens in its cache so far."""
    resume: tuple[int, list[Any]] | None = None
    """A prefill that yielded to an interactive request (see :mod:`.yielding`): the
    prompt tokens read and their KV cache, where it goes on from."""
    wanted: set[int] = dataclasses.field(default_factory=set)
    """Positions that a waiting request with the same prefix starts from: the cache
    there is stored as an entry as soon as it is reached."""
    _key: bytes | None = None

    @property
    def key(self) -> bytes:
        """The prompt's token ids as bytes (see :func:`.prompt_cache.token_bytes`)."""
        if self._key is None:
            self._key = token_bytes(self.prompt)
        return self._key

    @property
    def space(self) -> str:
        """Its prompt-cache space: caches never cross adapter sets."""
        return "+".join(self.adapters)

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt)


def step_label(actives: list[LmActive]) -> str:
    """What a step of ``actives`` does: ``prefill of 4096 tokens``, ``decode of 2
    requests``, or both (a stall report's words)."""
    prefill = [a for a in actives if a.solo is None and not a.decoding]
    decode = len(actives) - len(prefill)
    parts = []
    if prefill:
        parts.append(f"prefill of {sum(a.prompt_tokens for a in prefill)} tokens")
    if decode or not prefill:
        parts.append(f"decode of {decode} request{'s' if decode != 1 else ''}")
    return ", ".join(parts)


def drop_solo(active: LmActive) -> None:
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
