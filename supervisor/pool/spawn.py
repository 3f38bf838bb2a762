"""Starting a worker process and describing how it ended."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable, Sequence

from mlx_gateway.protocol.spec import WorkerSpec, encode_spec
from mlx_gateway.supervisor.config.schema import DistributedConfig

WorkerCommand = Callable[[WorkerSpec, str], Sequence[str]]
"""Builds a worker's argv from its spec and the gateway's endpoint."""

LOAD_FAILED_EXIT_CODE = 3
"""A worker exits with this code after it reported that its model could not load."""


async def start_process(argv: Sequence[str], env: dict[str, str]) -> asyncio.subprocess.Process:
    """Start a worker: no stdin, stdout and stderr as one pipe the gateway reads, in
    its own session (its own process group: signals reach its children too).

    Raises :class:`OSError` when it cannot be started."""
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


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


def distributed_command(
    spec: WorkerSpec,
    endpoint: str,
    spread: DistributedConfig,
    python: str | None = None,
    env: dict[str, str] | None = None,
) -> list[str]:
    """``mlx.launch … -- <the worker command>``: ``mlx.launch``
    starts one worker per rank (rank 0 on the first host speaks to the gateway; the
    others follow it, see ``mlx_gateway.workers.runtime.ring``). Its ranks share its process
    group here, so the handle's signals reach the local ones; it stops the others
    when one rank fails."""
    interpreter = python or sys.executable
    # mlx.launch, waiting instead of spinning (see mlx_gateway.workers.runtime.launch)
    launch = [interpreter, "-m", "mlx_gateway.workers.runtime.launch", "--backend", spread.backend]
    if spread.hostfile is not None:
        launch += ["--hostfile", spread.hostfile]
    else:
        launch += ["--hosts", ",".join(spread.hosts)]
    if spread.ranks_per_host > 1:
        launch += ["--repeat-hosts", str(spread.ranks_per_host)]
    if spread.starting_port is not None:
        launch += ["--starting-port", str(spread.starting_port)]
    if spread.python is not None:
        launch += ["--python", spread.python]
    # Ranks started over ssh do not inherit the gateway's environment: pass on what
    # every rank needs (unbuffered output for the gateway's log, the model's own).
    for key, value in {"PYTHONUNBUFFERED": "1", **(env or {})}.items():
        launch += ["--env", f"{key}={value}"]
    return [*launch, "--", *worker_command(spec, endpoint, python=interpreter)]


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
