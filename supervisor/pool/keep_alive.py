"""Client-set model lifetimes (``keep_alive``, ``ttl``), as Ollama applies them.

A request may say how long its model stays loaded after its last request. As in
Ollama, that applies to that request: the model's lifetime is that of the request
that started last, and a request that names none (most apps send none) sets the
entry's ``idle_timeout`` again. ``0`` stops the model as soon as it is idle,
``math.inf`` never. The server's ``client_keep_alive: false`` ignores them;
``max_keep_alive`` caps them. As with ``idle_timeout``, a busy model is never
stopped, and only ``on_demand`` models are (one with ``on_demand: false`` is kept
running whatever a client says).

A route notes what its request asked for (:func:`request_lifetime`, in the
request's context); the request's admission (:func:`request_started`, from
``Admission.session``, or Ollama's empty load request) makes it the model's.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import weakref
from types import MappingProxyType
from typing import Any

from mlx_gateway.supervisor.config import ServerConfig

log = logging.getLogger("mlx_gateway.keep_alive")

_set: dict[int, float] = {}
"""``id(handle)`` → seconds a client asked for (``math.inf``: forever); an entry
goes with its handle (handles need not be hashable: the API tests' fake is not)."""

_ASKED: contextvars.ContextVar[MappingProxyType[int, float]] = contextvars.ContextVar(
    "keep_alive_asked", default=MappingProxyType({})
)
"""What the current request asked for, by ``id(handle)`` (its own context: tasks
it starts see it, other requests do not)."""


def _record(handle: Any, seconds: float) -> None:
    key = id(handle)
    if key not in _set:
        with contextlib.suppress(TypeError):  # not weakly referable: kept for good
            weakref.finalize(handle, _set.pop, key, None)
    _set[key] = seconds


def request_lifetime(handle: Any, seconds: float | None, server: ServerConfig) -> None:
    """Note what the current request asked for (``None``: it did not ask); it
    applies once the request starts (:func:`request_started`)."""
    if seconds is None or not server.client_keep_alive:
        return
    if server.max_keep_alive is not None:
        seconds = min(seconds, server.max_keep_alive)
    _ASKED.set(MappingProxyType({**_ASKED.get(), id(handle): seconds}))


def request_started(handle: Any) -> None:
    """A request for ``handle``'s model starts: its lifetime becomes what the
    request asked for, or the entry's ``idle_timeout`` when it asked for nothing."""
    key = id(handle)
    seconds = _ASKED.get().get(key)
    before = _set.get(key)
    if seconds == before:
        return
    if seconds is None:
        _set.pop(key, None)
        log.info(
            "[%s] lifetime back to its idle_timeout (a request without keep_alive)", handle.name
        )
        return
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
