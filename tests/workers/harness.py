"""Drive a real worker process over a real ZeroMQ ROUTER, as the gateway does.

Synchronous on purpose: the tests read replies in order and want plain timeouts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import zmq

from mlx_gateway.protocol.frames import pack_to, unpack_reply
from mlx_gateway.protocol.messages import (
    Batch,
    Chunk,
    Done,
    Error,
    Generate,
    Reply,
    Request,
    SamplingParams,
    Scores,
    Started,
)
from mlx_gateway.protocol.spec import WorkerSpec, encode_spec

Event = Started | Chunk | Scores | Done | Error


class WorkerHarness:
    """One worker subprocess and the ROUTER socket it talks to.

    Replies are sorted as they arrive: per-request events (``Started``, the chunks
    of every ``Batch``, ``Done``/``Error``) by request id, everything else
    (``Ready``, ``Progress``, ``Heartbeat``, load errors) in :attr:`others`.
    """

    def __init__(
        self,
        tmp: Path,
        model_path: str | Path,
        *,
        parent_pid: int | None = None,
        env: dict[str, str] | None = None,
        **spec_fields: object,
    ) -> None:
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.endpoint = f"ipc://{tmp}/gateway.sock"
        self.router.bind(self.endpoint)
        self.spec = WorkerSpec(
            worker_id=f"w-{tmp.name}",
            kind=str(spec_fields.pop("kind", "lm")),
            model_path=str(model_path),
            served_model_name="tiny",
            **spec_fields,  # type: ignore[arg-type]
        )
        self.identity = self.spec.worker_id.encode()
        self.stderr_path = tmp / "worker.stderr"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlx_gateway.workers",
                "--endpoint",
                self.endpoint,
                "--spec",
                encode_spec(self.spec),
                "--parent-pid",
                str(parent_pid if parent_pid is not None else os.getpid()),
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
        )
        self.events: dict[str, list[Event]] = defaultdict(list)
        self.batches: list[Batch] = []
        self.others: list[Reply] = []

    # ------------------------------------------------------------ sending

    def send(self, msg: Request) -> None:
        self.router.send_multipart(pack_to(self.identity, msg))

    def send_raw(self, *frames: bytes) -> None:
        self.router.send_multipart([self.identity, *frames])

    def generate(self, request_id: str, prompt: str | None = None, **sampling: object) -> None:
        """A chat request with one user message (or a raw ``prompt=``)."""
        text = sampling.pop("content", "hello world")
        raw = sampling.pop("raw_prompt", None)
        self.send(
            Generate(
                request_id=request_id,
                messages=None if raw is not None else [{"role": "user", "content": text}],
                prompt=raw,  # type: ignore[arg-type]
                sampling=SamplingParams(**sampling),  # type: ignore[arg-type]
            )
        )

    # ------------------------------------------------------------ receiving

    def poll(self, timeout: float) -> Reply | None:
        """Receive and file one reply; None after ``timeout`` seconds."""
        if not self.router.poll(timeout * 1000):
            return None
        _, reply, _ = unpack_reply(self.router.recv_multipart())
        match reply:
            case Batch(chunks=chunks):
                self.batches.append(reply)
                for chunk in chunks:
                    self.events[chunk.request_id].append(chunk)
            case Chunk() | Started() | Scores() | Done():
                self.events[reply.request_id].append(reply)
            case Error(request_id=request_id) if request_id:
                self.events[request_id].append(reply)
            case _:
                self.others.append(reply)
        return reply

    def wait_for(self, predicate, timeout: float = 30.0, what: str = "a reply"):  # type: ignore[no-untyped-def]
        """Poll until ``predicate()`` is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {what}; stderr:\n{self.stderr()}")
            self.poll(min(left, 0.2))
            if self.proc.poll() is not None and not self.router.poll(0):
                value = predicate()
                if value:
                    return value
                raise AssertionError(
                    f"worker exited ({self.proc.returncode}) while waiting for {what}; "
                    f"stderr:\n{self.stderr()}"
                )

    def wait_other(self, kind: type, timeout: float = 60.0):  # type: ignore[no-untyped-def]
        def found():  # type: ignore[no-untyped-def]
            return next((m for m in self.others if isinstance(m, kind)), None)

        return self.wait_for(found, timeout, what=kind.__name__)

    def finished(self, request_id: str, timeout: float = 30.0) -> list[Event]:
        """Every event of ``request_id`` up to and including its Done or Error."""

        def ended() -> list[Event] | None:
            events = self.events.get(request_id, [])
            if events and isinstance(events[-1], Done | Error):
                return events
            return None

        return self.wait_for(ended, timeout, what=f"the end of {request_id}")

    # ------------------------------------------------------------ process

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-4000:]

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker still running after {timeout} s; stderr:\n{self.stderr()}"
            ) from None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.router.close()
        self.context.term()
        self._stderr.close()


def text_of(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, Chunk))
