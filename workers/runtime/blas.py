"""Which BLAS this worker's MLX computes with (reported in ``Ready``, shown in /health)."""

from __future__ import annotations

import sys


def blas_in_use() -> str:
    """``openblas`` when OpenBLAS is mapped into this process (the gateway preloads
    it on Linux), ``reference`` for the BLAS bundled with the ``mlx-cpu`` wheel,
    ``accelerate`` on macOS (MLX's Metal build uses Apple's Accelerate)."""
    if sys.platform == "darwin":
        return "accelerate"
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                if "libopenblas" in line:
                    return "openblas"
    except OSError:
        return "unknown"
    return "reference"
