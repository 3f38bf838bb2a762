"""One prefill of a shared prefix (a system prompt) serves every request that arrived
with it: a queued request whose prompt starts with what a running request is
prefilling waits for that request to reach a checkpoint there (see
:mod:`.checkpoints`), which is stored in the prompt cache, and starts from it."""

from __future__ import annotations

from collections.abc import Iterable

from mlx_gateway.workers.lm.active import LmActive
from mlx_gateway.workers.lm.prompt_cache import PromptCache, common_prefix

SHARE_MIN = 64
"""A request waits for another's prefill of their shared prefix only when that
saves it at least this many tokens of prefill."""


def awaits_prefix(waiting: LmActive, running: Iterable[LmActive], cache: PromptCache) -> bool:
    """Whether ``waiting`` should wait for a request of ``running`` now prefilling the
    same prefix: that one reaches a checkpoint within the shared tokens, well past
    what the prompt ``cache`` already holds for ``waiting``. The checkpoint is then
    marked as wanted, so that the cache there is stored when it is reached."""
    limit = waiting.prompt_tokens - 1
    for other in running:
        if other.decoding or other.space != waiting.space or not other.marks:
            continue
        shared = min(common_prefix(other.key, waiting.key), limit)
        ahead = [p for p in other.marks if other.prefilled < p <= shared]
        if not ahead:
            continue
        target = max(ahead)
        if target - cache.reusable(waiting.key, waiting.space) < SHARE_MIN:
            continue
        other.wanted.add(target)
        return True
    return False
