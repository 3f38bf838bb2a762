"""Prometheus text exposition (format 0.0.4), written by hand: counters,
histograms and scrape-time gauges with labels. No I/O, no global registry.

Each family renders its ``# HELP`` and ``# TYPE`` lines followed by its samples;
label values are escaped as the format requires (backslash, quote, newline).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Iterator, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = tuple[str, ...]


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value: integers without a fraction, ``NaN``, ``+Inf``, ``-Inf``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def sample(name: str, names: Sequence[str], values: Sequence[str], value: float) -> str:
    """One sample line: ``name{a="x",b="y"} value``."""
    if names:
        pairs = ",".join(f'{k}="{escape_label(v)}"' for k, v in zip(names, values, strict=True))
        return f"{name}{{{pairs}}} {format_value(value)}"
    return f"{name} {format_value(value)}"


def header(name: str, kind: str, help: str) -> list[str]:
    help_text = help.replace("\\", "\\\\").replace("\n", "\\n")
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


class Counter:
    """A monotonically increasing value per label combination."""

    def __init__(self, name: str, help: str, labels: Sequence[str] = ()) -> None:
        self.name, self.help, self.labels = name, help, tuple(labels)
        self.values: dict[Labels, float] = {}

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        key = tuple(labels)
        self.values[key] = self.values.get(key, 0.0) + amount

    def get(self, *labels: str) -> float:
        return self.values.get(tuple(labels), 0.0)

    def render(self) -> Iterator[str]:
        yield from header(self.name, "counter", self.help)
        for key in sorted(self.values):
            yield sample(self.name, self.labels, key, self.values[key])


class Histogram:
    """Observations counted into cumulative ``le`` buckets, with their sum and count."""

    def __init__(
        self, name: str, help: str, buckets: Sequence[float], labels: Sequence[str] = ()
    ) -> None:
        self.name, self.help, self.labels = name, help, tuple(labels)
        self.buckets = tuple(sorted(buckets))
        # Per label combination: count per bucket (the last one is +Inf), then sum.
        self._counts: dict[Labels, list[int]] = {}
        self._sums: dict[Labels, float] = {}

    def observe(self, *labels: str, value: float) -> None:
        key = tuple(labels)
        counts = self._counts.setdefault(key, [0] * (len(self.buckets) + 1))
        counts[bisect.bisect_left(self.buckets, value)] += 1
        self._sums[key] = self._sums.get(key, 0.0) + value

    def count(self, *labels: str) -> int:
        return sum(self._counts.get(tuple(labels), ()))

    def render(self) -> Iterator[str]:
        yield from header(self.name, "histogram", self.help)
        names = (*self.labels, "le")
        for key in sorted(self._counts):
            cumulative = 0
            # Bounds as floats ("1.0"), as Prometheus' own clients write them.
            bounds = [*(repr(float(b)) for b in self.buckets), "+Inf"]
            for bound, count in zip(bounds, self._counts[key], strict=True):
                cumulative += count
                yield sample(f"{self.name}_bucket", names, (*key, bound), cumulative)
            yield sample(f"{self.name}_sum", self.labels, key, self._sums[key])
            yield sample(f"{self.name}_count", self.labels, key, cumulative)


def gauge(
    name: str, help: str, labels: Sequence[str], samples: Iterable[tuple[Labels, float]]
) -> Iterator[str]:
    """A gauge family whose samples are read at scrape time."""
    yield from header(name, "gauge", help)
    for key, value in samples:
        yield sample(name, labels, key, value)


def counter_of(
    name: str, help: str, labels: Sequence[str], samples: Iterable[tuple[Labels, float]]
) -> Iterator[str]:
    """A counter family whose totals are kept elsewhere and read at scrape time."""
    yield from header(name, "counter", help)
    for key, value in samples:
        yield sample(name, labels, key, value)
