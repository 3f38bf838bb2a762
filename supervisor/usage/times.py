"""The time range a client names: Unix seconds or ISO 8601 dates and times."""

from __future__ import annotations

from datetime import UTC, datetime

DAY = 86400.0


def parse_time(text: str, *, end: bool = False) -> float:
    """``1767225600`` (Unix seconds), ``2026-11-28`` (that day's start, UTC; as an
    ``end``, the next day's start, so that the day is included) or
    ``2026-11-28T10:00:00Z`` / ``…+02:00`` (UTC when no offset is given).

    Raises :class:`ValueError` with what is wrong."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is neither Unix seconds nor an ISO 8601 date or time "
            "(2026-11-28, 2026-11-28T10:00:00Z)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    date_only = len(text) == len("2026-11-28")
    return when.timestamp() + (DAY if end and date_only else 0.0)
