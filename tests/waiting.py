"""Waiting for an event, not for a time: the polling helpers of the tests.

A test waits for the state it needs (a worker's in-flight count, a log line, a
file) with :func:`until`; the timeout is only the bound past which the test fails.
tests/test_no_sleeps.py refuses a bare sleep of more than 0.1 s anywhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any


async def until(
    predicate: Callable[[], Any],
    timeout: float,
    state: Callable[[], Any] | None = None,
    interval: float = 0.02,
) -> Any:
    """Poll ``predicate`` until it is true and return its value; past ``timeout``
    seconds, fail with ``state()`` (what the test was waiting on) in the message."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            seen = state() if state is not None else None
            raise AssertionError(f"not met within {timeout} s; state: {seen!r}")
        await asyncio.sleep(interval)
    return value


def until_sync(
    predicate: Callable[[], Any],
    timeout: float,
    state: Callable[[], Any] | None = None,
    interval: float = 0.02,
) -> Any:
    """:func:`until` for a test without an event loop."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            seen = state() if state is not None else None
            raise AssertionError(f"not met within {timeout} s; state: {seen!r}")
        time.sleep(interval)
    return value


@contextlib.asynccontextmanager
async def own_tasks() -> AsyncIterator[list[asyncio.Task[Any]]]:
    """``async with own_tasks() as tasks:`` — the tasks appended to ``tasks`` are
    cancelled (those still running) and awaited when the block ends, however it
    ends, so that none outlives its test."""
    tasks: list[asyncio.Task[Any]] = []
    try:
        yield tasks
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
