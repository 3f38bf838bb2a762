"""Launching the real ``mlx-gateway`` command for end-to-end tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

MLX_GATEWAY = Path(sys.executable).with_name("mlx-gateway")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fake_worker_entry(tmp: Path, mode: str, served: str, **keys: Any) -> dict[str, Any]:
    """A model entry whose worker is the fake one (tests/supervisor/processes), started
    through the entry's ``python`` option by the real gateway command: ``mode`` is its
    behaviour at start (``ok``, ``reasoner`` …), ``keys`` more keys of the entry."""
    from ..supervisor.fakes import FAKE_WORKER

    shim = tmp / "worker.sh"
    # The gateway runs "<python> -m mlx_gateway.workers --endpoint … --spec … …".
    shim.write_text(f'#!/bin/sh\nshift 2\nexec "{sys.executable}" "{FAKE_WORKER}" "$@"\n')
    shim.chmod(0o755)
    # The fake worker's mode is the path's last segment.
    (tmp / "fake" / mode).mkdir(parents=True, exist_ok=True)
    return {
        "model_path": str(tmp / "fake" / mode),
        "served_model_name": served,
        "python": str(shim),
        **keys,
    }


class Gateway:
    """A running ``mlx-gateway launch --config …`` process."""

    def __init__(
        self,
        tmp: Path,
        models: list[dict[str, Any]],
        env: dict[str, str] | None = None,
        realtime: dict[str, Any] | None = None,
        tools: dict[str, Any] | None = None,
        **server: Any,
    ) -> None:
        self.port = free_port()
        self.config_path = tmp / "config.yaml"
        server = {"port": self.port, "shutdown_grace": 2, "log_level": "info", **server}
        config: dict[str, Any] = {"server": server, "models": models}
        if realtime is not None:
            config["realtime"] = realtime
        if tools is not None:
            config["tools"] = tools
        self.config_path.write_text(yaml.safe_dump(config))
        self.log_path = tmp / "gateway.log"
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [str(MLX_GATEWAY), "launch", "--config", str(self.config_path)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
        )
        self.base_url = f"http://127.0.0.1:{self.port}"
        self._wait_healthy()

    def _wait_healthy(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.base_url}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"gateway not healthy in {timeout} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def model(self, name: str) -> dict[str, Any]:
        response = httpx.get(f"{self.base_url}/v1/models/{name}", timeout=5)
        response.raise_for_status()
        return response.json()  # type: ignore[no-any-return]

    def worker_pids(self) -> list[int]:
        """Every live process the gateway started (its workers and their children)."""
        try:
            children = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []
        return [c.pid for c in children if _alive(c.pid)]

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def alive(pid: int) -> bool:
    return _alive(pid)


def wait_until(predicate: Any, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
