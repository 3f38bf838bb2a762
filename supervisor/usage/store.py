"""The usage database: a SQLite file written by a thread of its own.

The request path only queues a row (:meth:`UsageStore.add`: a put on a
``queue.Queue``, which never waits); the writer thread takes what is queued and
writes it in one transaction per batch. A database that is slow or locked by
another program holds up that thread alone: rows wait in the queue (up to
:data:`MAX_QUEUED`, past which new ones are dropped and counted) and are written
once it is free. Reads (``GET /v1/usage``) open their own connection in a worker
thread; the file is in WAL mode so that they do not wait for a write. Rows older
than ``server.usage_retention_days`` are deleted at start and every hour.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from mlx_gateway.store.cache import gateway_cache_dir
from mlx_gateway.supervisor.usage.rows import UsageRow

log = logging.getLogger("mlx_gateway.usage")

FILE_NAME = "usage.sqlite3"
MAX_QUEUED = 100_000
"""Rows waiting for the writer at most; more are dropped (and logged)."""
BATCH = 500
"""Rows written in one transaction at most."""
PRUNE_EVERY = 3600.0
RETRY_AFTER = 1.0
"""Seconds before a batch the database refused (locked, full disk) is tried again."""
BUSY_TIMEOUT_MS = 5000

COLUMNS = tuple(field.name for field in dataclasses.fields(UsageRow))
SCHEMA = """
CREATE TABLE IF NOT EXISTS usage (
    at REAL NOT NULL,
    key TEXT NOT NULL,
    model TEXT NOT NULL,
    kind TEXT NOT NULL,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    cached_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    audio_seconds REAL NOT NULL DEFAULT 0,
    images INTEGER NOT NULL DEFAULT 0,
    duration REAL NOT NULL DEFAULT 0,
    status INTEGER NOT NULL,
    outcome TEXT
);
CREATE INDEX IF NOT EXISTS usage_at ON usage (at);
"""
INSERT = f"INSERT INTO usage ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"

T = TypeVar("T")


class _Flush:
    """A marker in the queue: the rows before it are written (or given up) once
    the writer reaches it."""

    def __init__(self) -> None:
        self.done = threading.Event()


_STOP = object()


def connect(path: Path) -> sqlite3.Connection:
    """A connection to the usage file at ``path`` (created with its table)."""
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(SCHEMA)
    return conn


class UsageStore:
    """The usage file at ``path`` and its writer thread (:meth:`start`, :meth:`close`)."""

    def __init__(self, path: Path, retention_days: float) -> None:
        self.path = path
        self.retention = retention_days * 86400.0
        self._queue: queue.Queue[object] = queue.Queue(MAX_QUEUED)
        self._thread = threading.Thread(target=self._run, name="usage-writer", daemon=True)
        self._closing = threading.Event()
        self.dropped = 0
        """Rows dropped because the queue was full."""
        self.written = 0

    def start(self) -> None:
        self._thread.start()

    def add(self, row: UsageRow) -> None:
        """Queue ``row`` for the writer; never waits (a full queue drops it)."""
        try:
            self._queue.put_nowait(row)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 10_000 == 0:
                log.warning(
                    "usage: %d rows dropped: %s is not being written (locked or slow?)",
                    self.dropped,
                    self.path,
                )

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    async def flush(self, timeout: float = 10.0) -> bool:
        """Wait (in a thread, never blocking the loop) until the rows queued before
        the call are written; ``False`` when that took over ``timeout``."""
        if not self._thread.is_alive():
            return False
        marker = _Flush()
        try:
            self._queue.put_nowait(marker)
        except queue.Full:
            return False
        return await asyncio.to_thread(marker.done.wait, timeout)

    async def read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``work`` with a read connection of its own, in a thread."""

        def run() -> T:
            conn = connect(self.path)
            try:
                return work(conn)
            finally:
                conn.close()

        return await asyncio.to_thread(run)

    async def close(self, timeout: float = 10.0) -> None:
        """Write what is queued (waiting ``timeout`` at most), then stop the thread.
        Rows the file still refuses by then are given up, with a warning."""
        if not self._thread.is_alive():
            return
        written = await self.flush(timeout)
        self._closing.set()  # a batch being tried again is given up
        if not written:
            log.warning("usage: %s did not take the last rows in %.0f s", self.path, timeout)
        try:
            self._queue.put_nowait(_STOP)
        except queue.Full:
            return  # the daemon thread ends with the process
        await asyncio.to_thread(self._thread.join, timeout)

    # ------------------------------------------------------------ the writer thread

    def _run(self) -> None:
        conn = self._open()
        if conn is None:
            return
        pruned = 0.0
        try:
            while True:
                if time.time() - pruned >= PRUNE_EVERY:
                    pruned = time.time()
                    self._prune(conn)
                try:
                    first = self._queue.get(timeout=PRUNE_EVERY)
                except queue.Empty:
                    continue
                if first is _STOP:
                    return
                rows, markers, stop = self._batch(first)
                self._write(conn, rows, stop)
                for marker in markers:
                    marker.done.set()
                if stop:
                    return
        finally:
            conn.close()

    def _open(self) -> sqlite3.Connection | None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return connect(self.path)
        except (OSError, sqlite3.Error) as exc:
            log.error("usage: cannot open %s (%s): usage is not recorded", self.path, exc)
            return None

    def _batch(self, first: object) -> tuple[list[UsageRow], list[_Flush], bool]:
        """``first`` and what else is queued now (up to :data:`BATCH` rows)."""
        rows: list[UsageRow] = []
        markers: list[_Flush] = []
        item: Any = first
        while True:
            if item is _STOP:
                return rows, markers, True
            if isinstance(item, _Flush):
                markers.append(item)
            elif isinstance(item, UsageRow):
                rows.append(item)
            if len(rows) >= BATCH:
                return rows, markers, False
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return rows, markers, False

    def _write(self, conn: sqlite3.Connection, rows: list[UsageRow], last: bool) -> None:
        """Write ``rows`` in one transaction, trying again while the database refuses
        (``last``: once more only, the gateway is stopping)."""
        if not rows:
            return
        values = [dataclasses.astuple(row) for row in rows]
        while True:
            try:
                with conn:
                    conn.executemany(INSERT, values)
                self.written += len(values)
                return
            except sqlite3.Error as exc:
                log.warning("usage: writing %d rows to %s failed: %s", len(values), self.path, exc)
                if last or self._closing.wait(RETRY_AFTER):
                    return

    def _prune(self, conn: sqlite3.Connection) -> None:
        try:
            with conn:
                conn.execute("DELETE FROM usage WHERE at < ?", (time.time() - self.retention,))
        except sqlite3.Error as exc:
            log.warning("usage: pruning %s failed: %s", self.path, exc)


def usage_path(configured: str | None) -> Path:
    """``server.usage_path``, else ``usage.sqlite3`` in the gateway's state folder."""
    if configured:
        return Path(configured).expanduser()
    return gateway_cache_dir() / FILE_NAME
