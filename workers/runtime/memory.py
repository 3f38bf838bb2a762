"""What this worker process holds in memory, as the gateway's budget needs it."""

from __future__ import annotations

import psutil

from mlx_gateway.protocol.messages import Memory

_process = psutil.Process()


def measure_memory(kv: tuple[int, int, int] = (0, 0, 0)) -> Memory:
    """RSS from the OS plus MLX's allocator counters where MLX is present, and the
    backend's KV cache bytes ``kv`` (running requests, prompt cache, admission limit).

    The allocator counters are plain reads, safe from any thread; they do not
    touch MLX streams.
    """
    memory = Memory(rss=_process.memory_info().rss, kv_active=kv[0], kv_kept=kv[1], kv_limit=kv[2])
    try:
        import mlx.core as mx
    except ImportError:
        return memory
    memory.mlx_active = mx.get_active_memory()
    memory.mlx_cache = mx.get_cache_memory()
    memory.mlx_peak = mx.get_peak_memory()
    return memory
