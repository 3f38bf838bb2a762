"""Reading a value of a worker's ``WorkerSpec.options`` (what the gateway's config
put there for the model), with a :class:`LoadError` naming the option when it is
not what the worker can use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlx_gateway.workers.runtime.contract import LoadError


def seconds_option(options: Mapping[str, Any], key: str, default: float) -> float:
    """The option ``key`` as seconds ≥ 0 (``default`` when it is not set)."""
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise LoadError(f"option {key} must be a number of seconds ≥ 0, got {value!r}")
    return float(value)
