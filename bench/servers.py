"""The servers under test, each started as its own command on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import yaml


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


PRELOADED = "MLX_GATEWAY_BENCH_PRELOADED"
"""Set (to the library's path) in a benchmark restarted with OpenBLAS preloaded."""


def yaml_pairs(pairs: list[str], flag: str) -> dict[str, Any]:
    """``KEY=VALUE`` arguments of ``flag`` as a dict, each value read as YAML (as a
    config file would give it)."""
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"{flag} takes KEY=VALUE, got {pair!r}")
        values[key] = yaml.safe_load(value)
    return values


def reexec_with_openblas(module: str, argv: list[str]) -> None:
    """Restart ``python -m module argv`` with OpenBLAS preloaded, as the gateway
    preloads it into its workers (it must be there when the process starts). Returns
    when there is no OpenBLAS, or when this process already is the restarted one."""
    from mlx_gateway.supervisor.pool.blas import find_openblas, with_preload

    library = find_openblas()
    if library is None or os.environ.get(PRELOADED):
        return
    env = with_preload(dict(os.environ), library)
    env[PRELOADED] = library
    os.execve(sys.executable, [sys.executable, "-m", module, *argv], env)


class Server:
    """A server process whose output goes to a log file."""

    def __init__(self, name: str, argv: list[str], port: int, log: Path, env: dict[str, str]):
        self.name = name
        self.port = port
        self.model_name = "default_model"
        """What requests put in ``model``."""
        self.log_path = log
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            argv, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        self.process = psutil.Process(self.proc.pid)

    def wait_ready(self, path: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2):
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready in {timeout} s:\n{self.log()}")

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
            return json.loads(response.read())

    def children(self) -> list[psutil.Process]:
        try:
            return self.process.children(recursive=True)
        except psutil.Error:
            return []

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()


def launch_gateway(
    workdir: Path,
    models: list[dict[str, Any]],
    server: dict[str, Any] | None = None,
    name: str = "mlx-gateway",
    files: str = "gateway",
    realtime: dict[str, Any] | None = None,
    port: int | None = None,
    checkout: Path | None = None,
) -> Server:
    """``mlx-gateway launch --config …`` (the real command) with these model entries
    and server keys, on a free port, its config and log in ``workdir`` as
    ``<files>.yaml`` and ``<files>.log``; returned once ``/health`` answers.
    ``checkout``: the command of another clone of the repo (its ``.venv``), to
    measure two versions of the code side by side."""
    port = port or free_port()
    config = {
        "server": {"port": port, "log_level": "warning", "shutdown_grace": 2, **(server or {})},
        "models": models,
    }
    if realtime is not None:
        config["realtime"] = realtime
    path = workdir / f"{files}.yaml"
    path.write_text(yaml.safe_dump(config))
    command = Path(sys.executable).with_name("mlx-gateway")
    if checkout is not None:
        command = checkout / ".venv" / "bin" / "mlx-gateway"
    gateway = Server(
        name,
        [str(command), "launch", "--config", str(path)],
        port,
        workdir / f"{files}.log",
        {**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    gateway.wait_ready("/health")
    return gateway


def wait_model_ready(server: Server, model: str, timeout: float = 180.0) -> None:
    """Until ``model`` of the gateway ``server`` is loaded (``/health`` answers before)."""
    deadline = time.monotonic() + timeout
    while server.get(f"/v1/models/{model}").get("state") != "ready":
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited:\n{server.log()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{model} was not loaded in {timeout} s:\n{server.log()}")
        time.sleep(0.2)


def launch_loaded(workdir: Path, model_dir: Path, served: str, model_type: str) -> Server:
    """``mlx-gateway launch --config …`` serving one model of ``model_type``, loaded
    at launch; returned once the model is ready."""
    entry = {
        "served_model_name": served,
        "model_path": str(model_dir),
        "model_type": model_type,
        "on_demand": False,
        "idle_timeout": 0,
    }
    server = launch_gateway(workdir, [entry], name="the gateway")
    wait_model_ready(server, served, 180)
    return server


def start_gateway(
    workdir: Path,
    model_dir: Path,
    served_name: str,
    max_concurrency: int,
    prefill_batch: int,
    extra: dict[str, Any] | None = None,
    checkout: Path | None = None,
) -> Server:
    """``mlx-gateway launch --config …`` serving the benchmark model, loaded at launch
    (``extra``: more keys of its model entry; ``checkout``: another clone's command)."""
    entry = {
        "served_model_name": served_name,
        "model_path": str(model_dir),
        "on_demand": False,
        "idle_timeout": 0,
        "max_concurrency": max_concurrency,
        "prefill_batch_size": prefill_batch,
        **(extra or {}),
    }
    server = launch_gateway(workdir, [entry], checkout=checkout)
    server.model_name = served_name
    return server


def start_mlx_lm_server(
    workdir: Path, model_dir: Path, decode: int, prefill_batch: int, env: dict[str, str]
) -> Server:
    """``python -m mlx_lm.server`` on the same model with the same batch sizes."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "mlx_lm.server",
        "--model",
        str(model_dir),
        "--port",
        str(port),
        "--log-level",
        "WARNING",
        "--decode-concurrency",
        str(decode),
        "--prompt-concurrency",
        str(prefill_batch),
    ]
    server = Server("mlx_lm.server", argv, port, workdir / "mlx_lm_server.log", env)
    server.wait_ready("/v1/models")
    return server
