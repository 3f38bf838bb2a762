"""Gateways for the peer tests: live ones in this process (:func:`pair`), and one in
its own process (:class:`PeerProcess`) that a test can kill with SIGKILL."""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai

from mlx_gateway.supervisor.config.schema import PeerConfig

from ..live import LiveGateway

PEER_PROCESS = Path(__file__).parent.parent / "processes" / "peer_process.py"
LONG = " ".join(f"w{i}" for i in range(150))  # the fake worker echoes a word per 20 ms


def alpha(**more: Any) -> dict[str, Any]:
    return {"model_path": "fake/ok", "served_model_name": "alpha", **more}


def chat(gw: LiveGateway, model: str, text: str, **body: Any) -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": text}], **body},
        timeout=30,
    )


def sdk(gw: LiveGateway, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0, timeout=30)


@contextlib.contextmanager
def pair(
    remote: dict[str, Any], local: dict[str, Any], **server: Any
) -> Iterator[tuple[LiveGateway, LiveGateway]]:
    """Gateway ``b`` serving ``remote``, and gateway ``a`` serving ``local`` with ``b``
    as its peer (named ``b``): yields ``(a, b)``."""
    with (
        LiveGateway(remote) as b,
        LiveGateway(local, peers=[PeerConfig(url=b.url, name="b")], **server) as a,
    ):
        yield a, b


def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PeerProcess:
    """A gateway (fake workers) in its own process: ``kill()`` is a real SIGKILL."""

    def __init__(self, *models: str, api_keys: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, str(PEER_PROCESS), "--port", str(self.port)]
        for model in models:
            command += ["--model", model]
        for key in api_keys:
            command += ["--api-key", key]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        headers = {"authorization": f"Bearer {api_keys[0]}"} if api_keys else {}

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"peer exited: {self.proc.stderr.read()!r}")  # type: ignore[union-attr]
            try:
                return httpx.get(f"{self.url}/health", headers=headers, timeout=1).is_success
            except httpx.TransportError:
                return False

        wait_until(healthy, 30)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
