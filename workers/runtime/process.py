"""The worker's main thread: ZeroMQ I/O, heartbeats, signals and the parent watch.

Each heartbeat carries the MLX thread's progress (:mod:`.step_clock`), so a step
that never returns shows while this thread goes on beating.

It never waits on generation. One ``zmq.Poller`` watches the DEALER socket to the
gateway and the inproc PULL socket that carries the MLX thread's replies, waking
at least every :data:`TICK` seconds for timers. Requests go to the MLX thread
through its inbox (a ``queue.Queue``); ``Ping`` is answered here at once.

Exit paths:

* the MLX thread ends (``Shutdown`` served, or the model failed to load): its last
  replies are flushed and the process exits with the thread's code;
* SIGTERM/SIGINT: the MLX thread is told to cancel everything; after at most
  :data:`ABORT_WAIT` seconds the process exits 0 whether or not it finished;
* the ``--parent-pid`` process is gone (even SIGKILLed): exit 0 at once, within
  :data:`TICK` seconds, so no orphan keeps a model resident.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from types import FrameType

import msgspec
import psutil
import zmq

from mlx_gateway.protocol.frames import pack, unpack_request
from mlx_gateway.protocol.messages import Error, Heartbeat, Ping, Progress
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.runtime.contract import EXIT_OK, Abort
from mlx_gateway.workers.runtime.download import DOWNLOAD, describe
from mlx_gateway.workers.runtime.memory import measure_memory
from mlx_gateway.workers.runtime.serve import MLXThread

log = logging.getLogger(__name__)

TICK = 0.5
"""Longest poll wait; the parent is checked this often."""
ABORT_WAIT = 1.0
"""After SIGTERM, how long the MLX thread may take to cancel its work."""
REPLIES_ENDPOINT = "inproc://replies"


@dataclass(frozen=True)
class ParentWatch:
    """Is the process that started us still there? Compares the start time too,
    so a recycled pid does not count as alive, and a zombie (killed, not yet
    reaped by its own parent) counts as gone."""

    pid: int
    create_time: float

    @classmethod
    def of(cls, pid: int) -> ParentWatch | None:
        try:
            return cls(pid, psutil.Process(pid).create_time())
        except psutil.Error:
            return None

    def alive(self) -> bool:
        try:
            process = psutil.Process(self.pid)
            return (
                process.create_time() == self.create_time
                and process.status() != psutil.STATUS_ZOMBIE
            )
        except psutil.Error:
            return False


class _Stop:
    """Set by the signal handler; read by the loop at the next tick."""

    requested = False

    @classmethod
    def handler(cls, signum: int, frame: FrameType | None) -> None:
        cls.requested = True


def run(endpoint: str, spec: WorkerSpec, parent_pid: int | None) -> int:
    """Serve until told to stop; returns the exit code. The MLX thread may still
    be running (or be tearing down its thread-local MLX state): leave with
    ``os._exit``, not through interpreter finalization."""
    parent = None
    if parent_pid is not None:
        parent = ParentWatch.of(parent_pid)
        if parent is None:
            log.error("parent process %d is not running; exiting", parent_pid)
            return EXIT_OK
    signal.signal(signal.SIGTERM, _Stop.handler)
    signal.signal(signal.SIGINT, _Stop.handler)

    context = zmq.Context()
    dealer = context.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, spec.worker_id.encode())
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.setsockopt(zmq.SNDHWM, 0)  # replies queue rather than block this loop
    dealer.connect(endpoint)
    replies = context.socket(zmq.PULL)
    replies.setsockopt(zmq.RCVHWM, 0)
    replies.bind(REPLIES_ENDPOINT)

    mlx = MLXThread(spec, context, REPLIES_ENDPOINT)
    mlx.start()
    what = "spare, waiting for a model" if spec.spare else f"loading {spec.model_path}"
    log.info("worker %s (%s) pid %d: %s", spec.worker_id, spec.kind, os.getpid(), what)

    poller = zmq.Poller()
    poller.register(dealer, zmq.POLLIN)
    poller.register(replies, zmq.POLLIN)
    interval = spec.heartbeat_interval
    next_heartbeat = time.monotonic() + interval
    next_parent_check = time.monotonic() + TICK
    abort_deadline: float | None = None
    try:
        while True:
            now = time.monotonic()
            wait = TICK if interval <= 0 else min(TICK, max(next_heartbeat - now, 0.0))
            events = dict(poller.poll(int(wait * 1000)))
            if replies in events and _forward(replies, dealer):
                mlx.join()
                log.info("exiting with code %d", mlx.exit_code)
                # The last replies (a load Error, the cancelled Dones) must reach the gateway.
                dealer.setsockopt(zmq.LINGER, 2000)
                return mlx.exit_code
            if dealer in events:
                _receive(dealer, mlx)
            now = time.monotonic()
            if interval > 0 and now >= next_heartbeat:
                _heartbeat(dealer, mlx)
                next_heartbeat = now + interval
            if parent is not None and now >= next_parent_check:
                next_parent_check = now + TICK
                if not parent.alive():
                    log.warning("parent process %d is gone; exiting", parent.pid)
                    return EXIT_OK
            if _Stop.requested and abort_deadline is None:
                log.info("terminated by signal; cancelling work")
                mlx.inbox.put(Abort())
                abort_deadline = now + ABORT_WAIT
            if abort_deadline is not None and now >= abort_deadline:
                log.warning("the MLX thread did not stop within %.1f s; exiting", ABORT_WAIT)
                return EXIT_OK
    finally:
        dealer.close()
        replies.close(linger=0)
        if not mlx.is_alive():
            # With the thread alive its PUSH socket stays open and term() would hang.
            context.term()


def _forward(replies: zmq.Socket, dealer: zmq.Socket) -> bool:
    """Pass every waiting reply on to the gateway; True once the MLX thread ended."""
    while True:
        try:
            frames = replies.recv_multipart(zmq.NOBLOCK, copy=True)
        except zmq.Again:
            return False
        if frames == [b""]:
            return True
        dealer.send_multipart(frames)


def _receive(dealer: zmq.Socket, mlx: MLXThread) -> None:
    while True:
        try:
            frames = dealer.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return
        try:
            request, payloads = unpack_request(frames)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
            _malformed(dealer, frames, exc)
            continue
        if isinstance(request, Ping):
            _heartbeat(dealer, mlx)
        else:
            mlx.inbox.put((request, payloads))


def _malformed(dealer: zmq.Socket, frames: list[bytes], exc: Exception) -> None:
    """Log and drop a message we cannot decode. If it still names a request, answer
    that request with a 400 so the gateway's caller does not wait forever."""
    log.error("malformed message ignored: %s", exc)
    try:
        raw = msgspec.msgpack.decode(frames[0]) if frames else None
    except msgspec.DecodeError:
        return
    if not isinstance(raw, dict) or raw.get("op") in ("cancel", "shutdown", "ping"):
        return
    request_id = raw.get("request_id")
    if isinstance(request_id, str) and request_id:
        error = Error(
            message=f"malformed request: {exc}",
            request_id=request_id,
            status=400,
            type="invalid_request_error",
        )
        dealer.send_multipart(pack(error))


def _heartbeat(dealer: zmq.Socket, mlx: MLXThread) -> None:
    running, queued = mlx.counts()
    memory = measure_memory(mlx.kv_bytes())
    beat = Heartbeat(
        inflight=running,
        queued=queued,
        memory=memory,
        step=mlx.clock.snapshot(),
        prefill_tps=round(mlx.prefill_rate(), 1),
        finished=mlx.finished,
    )
    dealer.send_multipart(pack(beat))
    # While the MLX thread is inside a hub download, this thread reports its bytes.
    if moved := DOWNLOAD.take():
        fraction, detail = describe(*moved)
        dealer.send_multipart(pack(Progress(stage="download", fraction=fraction, detail=detail)))


def configure_logging(worker_id: str) -> None:
    """Plain lines on stderr; the gateway keeps the last ones for crash reports."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s.%(msecs)03d {worker_id} %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
    )
