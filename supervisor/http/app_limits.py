"""An app's limits (``server.keys[]``): requests and tokens per minute, tokens per
day, requests at once.

A generating request is admitted only while every limit of its app has room; else
it is a 429 ``rate_limit_error`` whose ``code`` is ``app_limit_exceeded``, whose
``param`` and message name the limit, and whose ``Retry-After`` header is the
number of seconds until the limit has room again. Requests are counted when they
are admitted; tokens can only be known once the answer is done, so they are charged
then (the prompt and output tokens the request used): a request is admitted while
the app's window still has at least one token left, and its answer may take the
window past the limit, which then refuses the next requests until enough of it has
aged out. Windows slide (any 60 seconds, any 24 hours), kept in small time slots.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from starlette.types import Scope

from mlx_gateway.supervisor.config.apps import KeyConfig
from mlx_gateway.supervisor.errors import GatewayError

MINUTE = 60.0
DAY = 86400.0
SLOTS = 120
"""Time slots per window: a minute in half seconds, a day in 12-minute slots."""


class AppLimitExceeded(GatewayError):
    status = 429
    type = "rate_limit_error"

    def __init__(self, app: str, limit: str, value: int, retry_after: float) -> None:
        wait = max(1, math.ceil(retry_after))
        super().__init__(
            f"App {app!r} is over its {limit} limit ({value}, server.keys); retry in {wait} s.",
            param=limit,
            code="app_limit_exceeded",
            headers={"Retry-After": str(wait)},
        )


class Window:
    """Amounts added over the last ``span`` seconds, in ``SLOTS`` slots."""

    def __init__(self, span: float, clock: Callable[[], float]) -> None:
        self.span = span
        self.slot = span / SLOTS
        self.clock = clock
        self._slots: deque[tuple[float, int]] = deque()  # (slot start, amount)
        self.total = 0

    def _expire(self, now: float) -> None:
        while self._slots and self._slots[0][0] + self.span <= now:
            self.total -= self._slots.popleft()[1]

    def used(self) -> int:
        self._expire(self.clock())
        return self.total

    def add(self, amount: int) -> None:
        if amount <= 0:
            return
        now = self.clock()
        self._expire(now)
        start = now - now % self.slot
        if self._slots and self._slots[-1][0] == start:
            self._slots[-1] = (start, self._slots[-1][1] + amount)
        else:
            self._slots.append((start, amount))
        self.total += amount

    def wait_below(self, limit: int) -> float:
        """Seconds until the total is below ``limit`` (0: it is now)."""
        now = self.clock()
        self._expire(now)
        total = self.total
        if total < limit:
            return 0.0
        for start, amount in self._slots:
            total -= amount
            if total < limit:
                return max(0.0, start + self.span - now)
        return self.span


class AppLimits:
    """The limits of one app and what it used of them."""

    def __init__(self, app: KeyConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.app = app
        self.requests = Window(MINUTE, clock)
        self.tokens_minute = Window(MINUTE, clock)
        self.tokens_day = Window(DAY, clock)
        self.in_flight = 0

    @property
    def any(self) -> bool:
        a = self.app
        return any(
            v is not None
            for v in (
                a.requests_per_minute,
                a.tokens_per_minute,
                a.tokens_per_day,
                a.max_concurrent,
            )
        )

    def admit(self) -> None:
        """Take one request in, or raise :class:`AppLimitExceeded`."""
        a = self.app
        if a.max_concurrent is not None and self.in_flight >= a.max_concurrent:
            raise AppLimitExceeded(a.name, "max_concurrent", a.max_concurrent, 1)
        for limit, window, value in (
            ("requests_per_minute", self.requests, a.requests_per_minute),
            ("tokens_per_minute", self.tokens_minute, a.tokens_per_minute),
            ("tokens_per_day", self.tokens_day, a.tokens_per_day),
        ):
            if value is not None and window.used() >= value:
                raise AppLimitExceeded(a.name, limit, value, window.wait_below(value))
        self.requests.add(1)
        self.in_flight += 1

    def release(self, tokens: int) -> None:
        """An admitted request ended, having used ``tokens``."""
        self.in_flight -= 1
        self.tokens_minute.add(tokens)
        self.tokens_day.add(tokens)


LIMITS_KEY = "app_limits"


def set_limits(scope: Scope, limits: AppLimits) -> None:
    """Hand ``limits`` to a path that admits its calls itself (the auth middleware,
    for :data:`.auth.SELF_ADMITTED`)."""
    scope.setdefault("state", {})[LIMITS_KEY] = limits


def limits_of(scope: Scope) -> AppLimits | None:
    """The limits of the app whose key ``scope`` carries, when it has some and the
    path admits its calls itself (:func:`set_limits`); else ``None``."""
    state = scope.get("state")
    found = state.get(LIMITS_KEY) if isinstance(state, dict) else None
    return found if isinstance(found, AppLimits) else None
