"""Memory sizes in the config: ``48GB``, ``512MiB``, a fraction of RAM."""

from __future__ import annotations

import re

import psutil

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: str | int | float) -> int:
    """``48GB``, ``512MiB``, ``1.5g`` or a plain number of bytes → bytes."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    match = _SIZE_RE.match(str(value))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"{value!r} is not a size; write e.g. 48GB, 512MiB or 0.75 (of RAM)")
    return int(float(match.group(1)) * _UNITS[unit])


AUTO_FRACTION = 0.75
"""``memory_budget: auto`` where MLX recommends no working set (Linux): this much RAM."""


def budget_bytes(
    budget: str | float, total: int | None = None, recommended: int | None = None
) -> int:
    """The memory budget in bytes: ``auto`` (MLX's ``recommended`` working set when
    known, else :data:`AUTO_FRACTION` of RAM), a fraction of RAM (``0 < x ≤ 1``) or
    a size."""
    if isinstance(budget, str) and budget.strip().lower() == "auto":
        if recommended:
            return recommended
        budget = AUTO_FRACTION
    if isinstance(budget, float | int) and not isinstance(budget, bool) and 0 < budget <= 1:
        return int(budget * (total if total is not None else psutil.virtual_memory().total))
    if isinstance(budget, float) and not budget.is_integer():
        raise ValueError(f"memory_budget {budget!r}: a fraction of RAM must be in (0, 1]")
    size = parse_size(budget)
    if size <= 0:
        raise ValueError(f"memory_budget must be positive, got {budget!r}")
    return size
