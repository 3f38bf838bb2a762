"""OpenBLAS for the workers on Linux.

The ``mlx-cpu`` wheel links the slow reference BLAS. Preloading OpenBLAS into a
worker (``LD_PRELOAD``) makes MLX's float32 matmuls call OpenBLAS instead: several
times the tokens per second of a small model and a much faster prefill, with the
same results. The gateway itself never loads it; it only finds the library and
sets the variable in the environment of the workers it starts.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys

LIBRARY = "libopenblas.so.0"

CANDIDATES: tuple[str, ...] = (
    # Debian/Ubuntu's libopenblas0-pthread, then its other variants and arches.
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-openmp/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    # Fedora, Arch and others.
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)
"""Where distributions install OpenBLAS, most specific first."""


@functools.cache
def find_openblas() -> str | None:
    """The path of an installed OpenBLAS on Linux, or ``None`` (also on other systems).

    Known install paths first, then the dynamic linker's cache (``ldconfig -p``)."""
    if not sys.platform.startswith("linux"):
        return None
    for path in CANDIDATES:
        if os.path.isfile(path):
            return path
    return _from_ldconfig()


def _from_ldconfig() -> str | None:
    ldconfig = shutil.which("ldconfig") or (
        "/sbin/ldconfig" if os.path.exists("/sbin/ldconfig") else None
    )
    if ldconfig is None:
        return None
    try:
        listing = subprocess.run(
            [ldconfig, "-p"], capture_output=True, text=True, timeout=5, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in listing.splitlines():
        name, _, target = line.strip().partition(" => ")
        if name.startswith(LIBRARY) and os.path.isfile(target):
            return target
    return None


THREAD_TIMEOUT = "4"
"""``OPENBLAS_THREAD_TIMEOUT`` set with the preload (unless already set): OpenBLAS's
helper threads then sleep at once after a call (2^4 cycles) instead of spinning for
2^28 cycles. The spinning is pure waste on a box that also runs the gateway and
other workers: measured on 2 cores with the tests' tiny llama at 32 streams, the
worker's helper thread burnt 214 µs of CPU per generated token (as much as the
model) with the default, 9 µs with 4; bigger matmuls still use every thread."""


def with_preload(env: dict[str, str], library: str) -> dict[str, str]:
    """``env`` with ``library`` first in ``LD_PRELOAD`` (kept once, others kept after)
    and :data:`THREAD_TIMEOUT` unless ``env`` chooses its own."""
    current = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p != library]
    return {
        "OPENBLAS_THREAD_TIMEOUT": THREAD_TIMEOUT,
        **env,
        "LD_PRELOAD": " ".join([library, *current]),
    }


def openblas_for(preload: bool, worker_env: dict[str, str]) -> str | None:
    """The OpenBLAS to preload into a worker: ``None`` when the switch is off, when
    the model's ``worker_env`` sets ``LD_PRELOAD`` itself (it wins), or when no
    OpenBLAS is installed (and on systems other than Linux)."""
    if not preload or "LD_PRELOAD" in worker_env:
        return None
    return find_openblas()
