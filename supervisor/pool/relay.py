"""The gateway's one ROUTER socket: sends requests to workers, demultiplexes replies.

Each worker connects a DEALER whose identity is its worker id. Replies that carry a
``request_id`` go to that request's queue (a :class:`~protocol.messages.Batch` is
fanned out to several); worker-level replies (Ready, Progress, Heartbeat, load
Errors) go to the handler the worker's owner attached.

Invariant: a request queue is only ever registered for a worker that is attached,
and detaching a worker (it exited) fails every queue it still had, so no client
waits for a reply that cannot come.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import NamedTuple, cast

import msgspec
import zmq
import zmq.asyncio

from mlx_gateway.protocol.frames import Frame, pack_to, unpack_reply
from mlx_gateway.protocol.messages import (
    Batch,
    Chunk,
    Done,
    Embeddings,
    Error,
    Image,
    ImageStep,
    Prefilled,
    Reply,
    Request,
    Scores,
    SpeechChunk,
    Started,
    Tokens,
    Transcript,
)

log = logging.getLogger("mlx_gateway.relay")

WorkerHandler = Callable[[Reply, list[bytes]], None]


class WithPayloads(NamedTuple):
    """A request's reply that came with binary frames (e.g. an embedding matrix)."""

    reply: Reply
    payloads: list[bytes]


RequestItem = Reply | WithPayloads | BaseException


class WorkerUnreachable(Exception):
    pass


class Relay:
    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._ctx = zmq.asyncio.Context()
        self._sock = self._ctx.socket(zmq.ROUTER)
        # Fail fast instead of silently dropping a message for a gone worker.
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._handlers: dict[str, WorkerHandler] = {}
        self._queues: dict[str, asyncio.Queue[RequestItem]] = {}
        self._owner: dict[str, str] = {}  # request_id → worker_id
        self._by_worker: dict[str, set[str]] = {}
        self._stopping: dict[str, BaseException] = {}  # worker_id → why it stops
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._sock.bind(self.endpoint)
        self._reader = asyncio.create_task(self._read_loop(), name="relay-reader")

    async def close(self) -> None:
        if self._reader:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._sock.close(0)
        self._ctx.term()

    # ------------------------------------------------------------ workers

    def attach(self, worker_id: str, handler: WorkerHandler) -> None:
        self._handlers[worker_id] = handler
        self._by_worker.setdefault(worker_id, set())

    def stopping(self, worker_id: str, reason: BaseException) -> None:
        """The gateway is stopping this worker: a request the worker ends with
        ``Done("cancelled")`` (its grace ran out) fails with ``reason`` instead,
        so the client learns why rather than seeing a quiet cancellation.
        (A request the client left is already closed: its late replies are dropped.)"""
        if worker_id in self._handlers:
            self._stopping[worker_id] = reason

    def detach(self, worker_id: str, reason: BaseException) -> None:
        """The worker is gone: fail all its requests with ``reason`` at once."""
        self._handlers.pop(worker_id, None)
        self._stopping.pop(worker_id, None)
        for request_id in self._by_worker.pop(worker_id, set()):
            queue = self._queues.get(request_id)
            if queue is not None:
                queue.put_nowait(reason)

    # ------------------------------------------------------------ requests

    def open(self, worker_id: str, request_id: str) -> asyncio.Queue[RequestItem]:
        """Register a request; its replies (or the worker's death) arrive on the queue."""
        if worker_id not in self._handlers:
            raise WorkerUnreachable(worker_id)
        if request_id in self._queues:
            raise ValueError(f"duplicate request id {request_id}")
        queue: asyncio.Queue[RequestItem] = asyncio.Queue()
        self._queues[request_id] = queue
        self._owner[request_id] = worker_id
        self._by_worker[worker_id].add(request_id)
        return queue

    def close_request(self, request_id: str) -> None:
        self._queues.pop(request_id, None)
        worker_id = self._owner.pop(request_id, None)
        if worker_id is not None:
            self._by_worker.get(worker_id, set()).discard(request_id)

    async def send(self, worker_id: str, msg: Request, payloads: Sequence[Frame] = ()) -> None:
        try:
            await self._sock.send_multipart(pack_to(worker_id.encode(), msg, payloads))
        except zmq.ZMQError as exc:
            if exc.errno == zmq.EHOSTUNREACH:
                raise WorkerUnreachable(worker_id) from exc
            raise

    def post(self, worker_id: str, msg: Request) -> None:
        """Send without waiting (safe in ``finally`` blocks of cancelled tasks);
        failures are logged, not raised."""
        try:
            future = cast(
                "asyncio.Future[object]",
                self._sock.send_multipart(pack_to(worker_id.encode(), msg)),
            )
        except zmq.ZMQError as exc:
            log.debug("could not post %s to %s: %s", type(msg).__name__, worker_id, exc)
            return
        future.add_done_callback(_log_send_failure)

    # ------------------------------------------------------------ reading

    async def _read_loop(self) -> None:
        while True:
            frames = await self._sock.recv_multipart()
            try:
                worker_id, reply, payloads = unpack_reply(frames)
            except (ValueError, msgspec.DecodeError, msgspec.ValidationError) as exc:
                log.warning("dropping a malformed message from a worker: %s", exc)
                continue
            try:
                self._dispatch(worker_id, reply, payloads)
            except Exception:  # a handler bug must not stop the relay for everyone
                log.exception("error while dispatching %s from %s", type(reply).__name__, worker_id)

    def _dispatch(self, worker_id: str, reply: Reply, payloads: list[bytes]) -> None:
        match reply:
            case Batch(chunks=chunks):
                for chunk in chunks:
                    self._deliver(chunk.request_id, chunk)
            case Done(finish_reason="cancelled") if worker_id in self._stopping:
                self._deliver(reply.request_id, self._stopping[worker_id])
            case (
                Started()
                | Prefilled()
                | Chunk()
                | Embeddings()
                | Scores()
                | Tokens()
                | Transcript()
                | SpeechChunk()
                | ImageStep()
                | Image()
                | Done()
            ):
                item = WithPayloads(reply, payloads) if payloads else reply
                self._deliver(reply.request_id, item)
            case Error(request_id=request_id) if request_id:
                self._deliver(request_id, reply)
            case _:
                handler = self._handlers.get(worker_id)
                if handler is not None:
                    handler(reply, payloads)

    def _deliver(self, request_id: str, item: RequestItem) -> None:
        queue = self._queues.get(request_id)
        if queue is not None:  # else: a late reply for a request the client abandoned
            queue.put_nowait(item)


def _log_send_failure(future: asyncio.Future[object]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.debug("a posted message was not delivered: %s", future.exception())
