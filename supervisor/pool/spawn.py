"""Starting a worker process and describing how it ended."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence

from mlx_gateway.protocol.spec import WorkerSpec, encode_spec

WorkerCommand = Callable[[WorkerSpec, str], Sequence[str]]
"""Builds a worker's argv from its spec and the gateway's endpoint."""

LOAD_FAILED_EXIT_CODE = 3
"""A worker exits with this code after it reported that its model could not load."""


def worker_command(spec: WorkerSpec, endpoint: str, python: str | None = None) -> list[str]:
    """``python -m mlx_gateway.workers …``; ``python`` may name another interpreter
    (a model whose backend needs its own virtualenv)."""
    return [
        python or sys.executable,
        "-m",
        "mlx_gateway.workers",
        "--endpoint",
        endpoint,
        "--spec",
        encode_spec(spec),
        "--parent-pid",
        str(os.getpid()),
    ]


def describe_exit(returncode: int) -> str:
    """A human reason for a worker's exit status."""
    if returncode < 0:
        signum = -returncode
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        if signum == signal.SIGKILL:
            return f"killed by {name} (out of memory? or killed by hand)"
        return f"killed by {name}"
    if returncode == LOAD_FAILED_EXIT_CODE:
        return "the model failed to load"
    return f"exited with code {returncode}"
