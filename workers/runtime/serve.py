"""The serve loop of a worker: the MLX thread and what it does between steps.

All MLX work of a worker runs on one thread, the *MLX thread* (MLX streams belong
to the thread that made them): it imports the backend, loads the model and then
alternates between taking requests from an inbox and running one step of work.
The main thread owns every ZeroMQ socket of the outside world (see
:mod:`.process`); this module never blocks it. What a backend must do is in
:mod:`.contract`.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Sequence

import msgspec
import psutil
import zmq

from mlx_gateway.protocol.frames import pack
from mlx_gateway.protocol.messages import (
    Assign,
    Cancel,
    Done,
    Error,
    Limits,
    ModelFacts,
    Pause,
    Progress,
    Ready,
    Reply,
    Request,
    Shutdown,
)
from mlx_gateway.protocol.spec import SPAWNED_AT_ENV, WorkerSpec
from mlx_gateway.workers.runtime.contract import (
    EXIT_CRASH,
    EXIT_LOAD_FAILED,
    EXIT_OK,
    Abort,
    Backend,
    Emit,
    Inbox,
    InboxItem,
    LoadError,
    RequestError,
)
from mlx_gateway.workers.runtime.duty_cycle import DutyCycle, clamped
from mlx_gateway.workers.runtime.extras import create_backend
from mlx_gateway.workers.runtime.memory import measure_memory
from mlx_gateway.workers.runtime.prefetch import Prefetch, start_prefetch
from mlx_gateway.workers.runtime.random_state import repair_random_state
from mlx_gateway.workers.runtime.ring import Leader
from mlx_gateway.workers.runtime.step_clock import StepClock

log = logging.getLogger(__name__)


class MLXThread(threading.Thread):
    """The thread that owns the backend. Replies travel to the main thread over an
    inproc PUSH socket; one empty frame after the last reply says the thread ended,
    and :attr:`exit_code` tells how."""

    def __init__(self, spec: WorkerSpec, context: zmq.Context, replies_endpoint: str) -> None:
        super().__init__(name="mlx", daemon=True)
        self.spec = spec
        self.inbox: Inbox = queue.Queue()
        self.exit_code = EXIT_CRASH
        self.backend: Backend | None = None
        self._context = context
        self._replies_endpoint = replies_endpoint
        self._push: zmq.Socket | None = None
        self._spare_kind = spec.kind
        self.clock = StepClock()
        """The thread's progress, read by the main thread for heartbeats."""
        self.finished = 0
        """Requests that ended with ``Done`` (heartbeats: the gateway learns memory
        needs only from requests that ran)."""

    def counts(self) -> tuple[int, int]:
        backend = self.backend
        return backend.counts() if backend is not None else (0, 0)

    def kv_bytes(self) -> tuple[int, int, int]:
        """The backend's KV cache bytes (running, kept, admission limit) where it
        tracks them."""
        backend = self.backend
        if backend is None:
            return 0, 0, 0
        try:
            active, kept, limit = backend.kv_bytes()
            return int(active), int(kept), int(limit)
        except Exception:  # a figure for a heartbeat must never break the worker
            log.debug("reading the KV cache size failed", exc_info=True)
            return 0, 0, 0

    def prefill_rate(self) -> float:
        """The backend's measured prefill speed (tokens per second; 0.0: unknown)."""
        backend = self.backend
        if backend is None:
            return 0.0
        try:
            return float(backend.prefill_rate())
        except Exception:  # a figure for a heartbeat must never break the worker
            log.debug("reading the prefill rate failed", exc_info=True)
            return 0.0

    def emit(self, msg: Reply, payloads: Sequence[bytes | memoryview] = ()) -> None:
        """Send ``msg``, followed by binary ``payloads`` (e.g. an embedding matrix)."""
        assert self._push is not None
        self._push.send_multipart(pack(msg, payloads))
        self.clock.progressed()
        if isinstance(msg, Done):
            self.finished += 1

    def run(self) -> None:
        # Sockets are not thread-safe: this one is made and used on this thread only.
        self._push = self._context.socket(zmq.PUSH)
        self._push.setsockopt(zmq.SNDHWM, 0)  # never block generation on the I/O thread
        self._push.connect(self._replies_endpoint)
        try:
            self.exit_code = self._run()
        except BaseException:
            log.exception("serve loop failed")
            self.exit_code = EXIT_CRASH
        finally:
            if self.backend is not None:
                try:
                    self.backend.close()
                except Exception:
                    log.exception("closing the backend failed")
            self._push.send(b"")
            self._push.close(linger=-1)

    def _run(self) -> int:
        backend: Backend | None = None
        self._spare_kind = self.spec.kind
        if self.spec.spare:
            try:
                backend = create_backend(self.spec.kind)
            except LoadError as exc:
                return self._load_failed(str(exc))
            log.info("spare %s worker ready: backend imported, waiting for a model", self.spec.kind)
            self.emit(Ready(pid=os.getpid(), facts=SPARE_FACTS, memory=measure_memory()))
            assigned = wait_for_assignment(self.inbox, self.emit)
            if assigned is None:
                return EXIT_OK
            self.spec = msgspec.structs.replace(
                assigned, worker_id=self.spec.worker_id, spare=False
            )
        spec = self.spec
        self.emit(Progress(stage="load", detail=spec.model_path))
        started = time.monotonic()
        # How long each part of the start took (logged): the process up to here (a
        # fresh worker; a spare's was long ago), the backend's imports, the load.
        phases: dict[str, float] = {}
        if backend is None:
            phases["interpreter and runtime"] = _since_process_start()
        prefetch: Prefetch | None = None
        try:
            if backend is None or spec.kind != self._spare_kind:
                # The weights are read into the file cache while the backend imports.
                prefetch = start_prefetch(spec.model_path)
                backend = create_backend(spec.kind)
                phases[f"{spec.kind} backend imports"] = time.monotonic() - started
            if spec.options.get("distributed"):
                backend = Leader(backend)
            loading = time.monotonic()
            self.clock.begin("load", measured=False)
            facts = backend.load(spec, self.emit)
            self.clock.end()
            phases["load"] = time.monotonic() - loading
        except LoadError as exc:
            return self._load_failed(str(exc))
        except Exception as exc:
            log.exception("loading %s failed", spec.model_path)
            return self._load_failed(f"load failed: {spec.model_path}: {type(exc).__name__}: {exc}")
        finally:
            if prefetch is not None:
                prefetch.stop()
        facts.load_seconds = round(time.monotonic() - started, 3)
        self.backend = backend
        ahead = "" if prefetch is None else f"; {prefetch.summary()}"
        log.info(
            "ready: %s loaded in %.2f s (%s%s)",
            spec.model_path,
            facts.load_seconds,
            ", ".join(f"{name} {seconds:.2f} s" for name, seconds in phases.items()),
            ahead,
        )
        self.emit(Ready(pid=os.getpid(), facts=facts, memory=measure_memory()))
        return serve(backend, self.inbox, self.emit, self.clock)

    def _load_failed(self, reason: str) -> int:
        log.error("%s", reason)
        self.emit(Error(message=reason, status=503, type="server_error"))
        return EXIT_LOAD_FAILED


def _since_process_start() -> float:
    """Seconds since this process was started (the interpreter, its imports, the
    ZeroMQ sockets and this thread's start): from the time the gateway passed
    (:data:`SPAWNED_AT_ENV`), else from the kernel's start time (on Linux that one
    can be up to a second off: psutil derives it from a boot time in whole seconds)."""
    try:
        started = float(os.environ[SPAWNED_AT_ENV])
    except (KeyError, ValueError):
        started = psutil.Process().create_time()
    return max(time.time() - started, 0.0)


SPARE_FACTS = ModelFacts(model_type="spare")
"""What a spare's ``Ready`` says of its (absent) model."""


def wait_for_assignment(inbox: Inbox, emit: Emit) -> WorkerSpec | None:
    """A spare's wait: the spec of the ``Assign`` that names its model, or ``None``
    when it is told to stop first. Any other request is refused with a 503."""
    while True:
        item = inbox.get()
        if isinstance(item, Abort):
            return None
        request, _payloads = item
        if isinstance(request, Assign):
            log.info("assigned %s (%s)", request.spec.model_path, request.spec.served_model_name)
            return request.spec
        if isinstance(request, Shutdown):
            log.info("spare stopped before it was given a model")
            return None
        if isinstance(request, Cancel | Limits | Pause):
            continue
        request_id = getattr(request, "request_id", "")
        emit(Error(message="this spare worker has no model yet", request_id=request_id, status=503))


def serve(backend: Backend, inbox: Inbox, emit: Emit, clock: StepClock | None = None) -> int:
    """Take requests between steps until told to stop; returns the exit code.

    Blocks on the inbox only while the backend is idle, so a cancel or a new
    request is seen before the next step. ``Shutdown(grace)`` stops admission and
    lets running work finish until the grace period ends, then cancels the rest.

    The backend's optional hooks: ``watch_inbox`` gets the inbox once, and a backend
    with an ``idle_interval`` (rank 0 of a sharded model) is not left blocked while
    idle: every that many seconds without a request its ``idle_tick`` runs.

    ``clock`` (the heartbeats' :class:`StepClock`) marks each step and each
    request's checks, so a step that never returns shows in the heartbeats.

    ``Pause(hold=True, duty=d)``: interactive work runs elsewhere on the machine;
    while every request here is ``batch`` (:meth:`Backend.runs_interactive` False)
    the steps take at most ``d`` of the wall time (:mod:`.duty_cycle`; 0: no step
    runs) and between them the loop waits on the inbox (a new request, a cancel,
    another ``Pause``).
    """
    clock = clock if clock is not None else StepClock()
    backend.watch_inbox(inbox)
    interval = backend.idle_interval
    drain_until: float | None = None
    held: DutyCycle | None = None
    """While held: the duty cycle this worker's batch steps keep."""
    while True:
        resting = held is not None and drain_until is None and _batch_only(backend)
        timeout = interval
        if held is not None and resting:
            rest = held.wait()  # None: no step while held; 0.0: one may run now
            resting = rest != 0.0
            if rest:
                timeout = rest if interval is None else min(rest, interval)
        block = drain_until is None and (resting or not backend.has_work())
        items = _take(inbox, block, timeout)
        if block and not items and interval is not None:
            backend.idle_tick()
            continue
        for item in items:
            if isinstance(item, Abort):
                backend.cancel_all()
                return EXIT_OK
            request, payloads = item
            if isinstance(request, Shutdown):
                log.info("shutdown requested (grace %.1f s)", request.grace)
                until = time.monotonic() + max(request.grace, 0.0)
                drain_until = until if drain_until is None else min(drain_until, until)
            elif isinstance(request, Cancel):
                backend.cancel(request.request_id)
            elif isinstance(request, Assign):
                log.warning("Assign ignored: this worker already serves a model")
            elif isinstance(request, Limits):
                backend.set_limits(request)
            elif isinstance(request, Pause):
                held = _held(held, request)
            elif drain_until is not None:
                request_id = getattr(request, "request_id", "")
                emit(
                    Error(message="the worker is shutting down", request_id=request_id, status=503)
                )
            else:
                clock.begin(f"checks of a {type(request).__name__} request")
                try:
                    _submit(backend, request, payloads, emit)
                finally:
                    clock.end()
        if drain_until is not None and (not backend.has_work() or time.monotonic() >= drain_until):
            backend.cancel_all()
            return EXIT_OK
        paced = held if held is not None and drain_until is None and _batch_only(backend) else None
        if paced is not None and not paced.ready():
            continue  # batch work rests while interactive work runs elsewhere
        if backend.has_work():
            started = paced.now() if paced is not None else 0.0
            clock.begin(_label(backend))
            try:
                backend.step()
            except Exception as exc:
                log.exception("step failed")
                backend.fail_active(f"generation failed: {type(exc).__name__}: {exc}")
                repair_random_state()
            finally:
                clock.end()
                if paced is not None:
                    paced.took(started, paced.now())


def _held(held: DutyCycle | None, pause: Pause) -> DutyCycle | None:
    """The duty cycle after ``pause``: none when released, the one kept when its share
    is unchanged, else a new one (whose first step may run at once)."""
    if not pause.hold:
        return None
    if held is not None and held.share == clamped(pause.duty):
        return held
    return DutyCycle(pause.duty)


def _batch_only(backend: Backend) -> bool:
    """Whether the backend has work and all of it is ``batch``."""
    try:
        return backend.has_work() and not backend.runs_interactive()
    except Exception:  # a priority check must never stop the worker
        log.debug("runs_interactive failed", exc_info=True)
        return False


def _label(backend: Backend) -> str:
    try:
        return backend.step_label()
    except Exception:  # a label for a stall report must never break the worker
        log.debug("step_label failed", exc_info=True)
        return "step"


def _take(inbox: Inbox, block: bool, timeout: float | None = None) -> list[InboxItem]:
    """Everything in the inbox now; with ``block``, wait for at least one item (at
    most ``timeout`` seconds when given: then the list may be empty)."""
    items: list[InboxItem] = []
    if block:
        try:
            items.append(inbox.get(timeout=timeout))
        except queue.Empty:
            return items
    while True:
        try:
            items.append(inbox.get_nowait())
        except queue.Empty:
            return items


def _submit(backend: Backend, request: Request, payloads: Sequence[bytes], emit: Emit) -> None:
    request_id = getattr(request, "request_id", "")
    try:
        backend.submit(request, payloads)
    except RequestError as exc:
        log.info("rejected %s: %s", request_id, exc.message)
        emit(exc.to_error(request_id))
    except Exception as exc:
        log.exception("request %s failed", request_id)
        emit(Error(message=f"{type(exc).__name__}: {exc}", request_id=request_id, status=500))
        repair_random_state()
