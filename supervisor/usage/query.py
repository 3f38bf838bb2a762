"""The sums of usage rows that ``GET /v1/usage`` answers, grouped and filtered."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

GROUPS: dict[str, str] = {
    "key": "key",
    "model": "model",
    "kind": "kind",
    "day": "date(at, 'unixepoch')",
}
"""What a request may be grouped by, and the SQL of each (``day``: the UTC date)."""
SUMS: dict[str, str] = {
    "requests": "COUNT(*)",
    "input_tokens": "SUM(input_tokens)",
    "cached_tokens": "SUM(cached_tokens)",
    "output_tokens": "SUM(output_tokens)",
    "audio_seconds": "SUM(audio_seconds)",
    "images": "SUM(images)",
    "duration": "SUM(duration)",
    "errors": "SUM(status >= 400)",
}
"""The figures of each group: requests, their tokens, seconds of audio, pictures,
seconds answering them, and how many were errors (status 400 or more)."""


@dataclass(frozen=True)
class UsageQuery:
    start: float
    end: float
    group_by: tuple[str, ...] = ()
    key: str | None = None
    """Only this app's rows."""
    model: str | None = None
    kind: str | None = None


def summarize(conn: sqlite3.Connection, query: UsageQuery) -> list[dict[str, Any]]:
    """One dict per group (the group's fields, then :data:`SUMS`), in group order;
    without ``group_by`` one total (none when no row matched)."""
    where = ["at >= ?", "at < ?"]
    params: list[Any] = [query.start, query.end]
    for column, value in (("key", query.key), ("model", query.model), ("kind", query.kind)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    groups = [f"{GROUPS[name]} AS g{i}" for i, name in enumerate(query.group_by)]
    sums = [f"COALESCE({sql}, 0)" for sql in SUMS.values()]
    sql = f"SELECT {', '.join([*groups, *sums])} FROM usage WHERE {' AND '.join(where)}"
    if query.group_by:
        order = ", ".join(f"g{i}" for i in range(len(query.group_by)))
        sql += f" GROUP BY {order} ORDER BY {order}"
    out = []
    width = len(query.group_by)
    for values in conn.execute(sql, params):
        row = dict(zip(query.group_by, values[:width], strict=True))
        figures = dict(zip(SUMS, values[width:], strict=True))
        if not figures["requests"]:
            continue
        figures["total_tokens"] = figures["input_tokens"] + figures["output_tokens"]
        figures["audio_seconds"] = round(float(figures["audio_seconds"]), 3)
        figures["duration"] = round(float(figures["duration"]), 3)
        out.append({**row, **figures})
    return out
