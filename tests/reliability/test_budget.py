"""Many streaming clients across three models when the memory budget fits only
two: swaps happen between answers, never during one, and no request is lost or
hangs."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import pytest

from ..supervisor.live import LiveGateway
from .test_load import answered, client, stream_chat, wait_idle

pytestmark = pytest.mark.slow

GB = 10**9
MODELS = ("fake/one", "fake/two", "fake/three")


async def test_200_streams_three_models_budget_for_two() -> None:
    models = [
        {
            "model_path": name,
            "memory_estimate": GB,
            "worker_env": {"FAKE_RSS": str(GB)},  # what the fake worker reports
            "max_concurrency": 16,
            "max_queue": 200,
            "queue_timeout": 60,
        }
        for name in MODELS
    ]
    with LiveGateway(*models, memory_budget="2.5GB", min_resident_seconds=0.5) as gw:
        prompts = [f"client {i} a b c" for i in range(200)]
        async with client(gw) as http:
            outcomes = await asyncio.wait_for(
                asyncio.gather(
                    *(stream_chat(http, MODELS[i % 3], p) for i, p in enumerate(prompts))
                ),
                150,
            )
        kinds: Counter[str] = Counter()
        for out, prompt in zip(outcomes, prompts, strict=True):
            if answered(out, prompt):
                kinds["answered"] += 1
                continue
            # Anything else must be a clear refusal before the stream, never a
            # broken answer (an eviction mid-answer would show as an error event).
            assert out.status in (429, 503), out
            assert out.error is not None and out.error["message"], out
            kinds[str(out.status)] += 1
        assert sum(kinds.values()) == 200
        evictions = sum(h.evictions for h in gw.registry.handles)
        logging.getLogger(__name__).warning(
            "budget for two of three models, 200 streams: %s, %d evictions", dict(kinds), evictions
        )
        assert kinds["answered"] >= 150, kinds
        wait_idle(gw)
        handles = gw.registry.handles
        assert sum(h.evictions for h in handles) >= 1  # the budget really forced swaps
        assert all(h.crashes == 0 for h in handles)
        resident = [h for h in handles if h.state.public in ("ready", "loading", "stopping")]
        assert len(resident) <= 2
