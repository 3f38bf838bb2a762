"""Client-set model lifetimes (``keep_alive``, ``ttl``).

A request may say how long its model stays loaded after its last request. That
replaces the entry's ``idle_timeout`` for that model from then on (until another
request says otherwise, a config reload replaces the entry, or the gateway
restarts): ``0`` stops it as soon as it is idle, ``math.inf`` never. The server's
``client_keep_alive: false`` ignores them; ``max_keep_alive`` caps them. As with
``idle_timeout``, a busy model is never stopped, and only ``on_demand`` models are
(one with ``on_demand: false`` is kept running whatever a client says).
"""

from __future__ import annotations

import contextlib
import logging
import math
import weakref
from typing import Any

from mlx_gateway.supervisor.config import ServerConfig

log = logging.getLogger("mlx_gateway.keep_alive")

_set: dict[int, float] = {}
"""``id(handle)`` → seconds a client asked for (``math.inf``: forever); an entry
goes with its handle (handles need not be hashable: the API tests' fake is not)."""


def _record(handle: Any, seconds: float) -> None:
    key = id(handle)
    if key not in _set:
        with contextlib.suppress(TypeError):  # not weakly referable: kept for good
            weakref.finalize(handle, _set.pop, key, None)
    _set[key] = seconds


def request_lifetime(handle: Any, seconds: float | None, server: ServerConfig) -> None:
    """Record what a request asked for (``None``: it did not ask)."""
    if seconds is None or not server.client_keep_alive:
        return
    if server.max_keep_alive is not None:
        seconds = min(seconds, server.max_keep_alive)
    if _set.get(id(handle)) != seconds:
        shown = "forever" if math.isinf(seconds) else f"{seconds:g} s"
        log.info("[%s] kept loaded %s after its last request (keep_alive)", handle.name, shown)
    _record(handle, seconds)


def lifetime(handle: Any) -> float | None:
    """Seconds after its last request that ``handle``'s model is stopped; ``None``:
    never (``on_demand: false``, ``idle_timeout: 0``, or a client said forever)."""
    if not handle.config.on_demand:
        return None
    seconds = _set.get(id(handle))
    if seconds is None:
        timeout = handle.config.idle_timeout
        return timeout if timeout > 0 else None
    return None if math.isinf(seconds) else seconds


def client_set(handle: Any) -> float | None:
    """What a client asked for this model, if anyone did (``math.inf``: forever)."""
    return _set.get(id(handle))


def expires_at(handle: Any) -> float | None:
    """The Unix time at which the loaded, idle model will be stopped; ``None`` when
    it is not loaded, is busy, or is kept without limit."""
    seconds = lifetime(handle)
    if seconds is None:
        return None
    status = handle.status()
    if status.state != "ready" or status.inflight or status.waiting:
        return None
    return None if status.last_used is None else float(status.last_used + seconds)
