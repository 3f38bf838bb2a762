"""The failure record of a model's handle: its last error, its consecutive
failures and their backoff, and its crashes (a crash loop makes it FAILED).

A load that fails, or a ready worker that crashes :data:`CRASH_LOOP` times within
:data:`CRASH_WINDOW` seconds, counts as a failure: the model is FAILED and is tried
again after :func:`~.state.failure_backoff` (an admin load clears it)."""

from __future__ import annotations

import time

from mlx_gateway.supervisor.errors import ModelUnavailable
from mlx_gateway.supervisor.pool.state import failure_backoff

CRASH_LOOP = 3  # crashes of a ready worker within CRASH_WINDOW that make it FAILED
CRASH_WINDOW = 60.0


class Failures:
    """What went wrong with one model's workers, and when it may be tried again."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.last_error: str | None = None
        self.count = 0  # consecutive failures (a load that failed, a crash loop)
        self.crashes = 0  # exits we did not ask for, since the gateway started
        self._failed_at = 0.0
        self._recent_crashes: list[float] = []

    def failed(self, error: str | None = None) -> None:
        """A start failed (``error``: why, when not already recorded)."""
        if error is not None:
            self.last_error = error
        self.count += 1
        self._failed_at = time.monotonic()

    def exited(self, reason: str) -> None:
        """A worker exited without being asked to."""
        self.last_error = reason
        self.crashes += 1

    def crash_loop(self, reason: str) -> bool:
        """A ready worker crashed: whether that makes a crash loop (then it counts
        as a failure, with the loop as its error)."""
        now = time.monotonic()
        self._recent_crashes = [t for t in self._recent_crashes if now - t < CRASH_WINDOW]
        self._recent_crashes.append(now)
        if len(self._recent_crashes) < CRASH_LOOP:
            return False
        self.failed(
            f"crash loop: {len(self._recent_crashes)} crashes within "
            f"{CRASH_WINDOW:g} s; last: {reason}"
        )
        return True

    def recovered(self) -> None:
        """A worker became ready."""
        self.count, self.last_error = 0, None

    def forgive(self) -> None:
        """An admin load: try now, whatever failed before."""
        self.count = 0
        self._recent_crashes.clear()

    def backoff_left(self) -> float:
        """Seconds until a FAILED worker may be tried again (≤ 0: now)."""
        return self._failed_at + failure_backoff(self.count) - time.monotonic()

    def unavailable(self, suffix: str = "") -> ModelUnavailable:
        return ModelUnavailable(
            f"model '{self.name}' is unavailable: {self.last_error or 'unknown error'}{suffix}",
            code="model_load_failed",
        )
