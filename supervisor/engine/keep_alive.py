"""A request's ``keep_alive``: how long its model stays loaded after the request.

Ollama's clients send seconds (``300``, ``-1``) or a Go duration string (``"5m"``,
``"1h30m"``, ``"10s"``, ``"-1m"``, ``"0"``); LM Studio's ``ttl`` is seconds. ``0``
unloads the model as soon as it is idle; a negative value keeps it until told
otherwise. The result is seconds, ``math.inf`` for "forever".
"""

from __future__ import annotations

import math
import re

from mlx_gateway.supervisor.config import ServerConfig
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.pool.keep_alive import request_lifetime
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_keep_alive(value: float | str | None, param: str = "keep_alive") -> float | None:
    """Seconds (``math.inf``: forever), or ``None`` when not sent; a 400 naming
    ``param`` for anything else."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise _invalid(value, param)
    text = value.strip() if isinstance(value, str) else None
    seconds = float(value) if text is None else _duration(text, param)
    if math.isnan(seconds):
        raise _invalid(value, param)
    return math.inf if seconds < 0 else seconds


def _duration(text: str, param: str) -> float:
    try:
        return float(text)  # "300", "-1": seconds
    except ValueError:
        pass
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    total = 0.0
    position = 0
    for match in _PART.finditer(body):
        if match.start() != position:
            raise _invalid(text, param)
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if not body or position != len(body):
        raise _invalid(text, param)
    return sign * total


def _invalid(value: object, param: str) -> BadRequest:
    return BadRequest(
        f"Invalid '{param}' {value!r}: give seconds (300, -1 for no limit, 0 to unload "
        'at once) or a duration such as "5m" or "1h30m".',
        param=param,
    )


def apply_keep_alive(
    server: ServerConfig, handle: ModelHandle, value: float | str | None, param: str = "keep_alive"
) -> float | None:
    """Parse a request's ``keep_alive`` (or ``ttl``) and record it for ``handle``'s
    model under the server's policy (see :mod:`...pool.keep_alive`)."""
    seconds = parse_keep_alive(value, param)
    request_lifetime(handle, seconds, server)
    return seconds


def client_lifetime(
    server: ServerConfig, handle: ModelHandle, keep_alive: float | str | None, ttl: float | None
) -> None:
    """The extension fields of the OpenAI and Anthropic routes: ``keep_alive`` (as
    Ollama's) or LM Studio's ``ttl`` (seconds); ``keep_alive`` wins."""
    if keep_alive is not None:
        apply_keep_alive(server, handle, keep_alive, "keep_alive")
    elif ttl is not None:
        apply_keep_alive(server, handle, ttl, "ttl")
