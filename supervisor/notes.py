"""Response headers that code deep below a route adds (the context-overflow policy
saying it shortened the conversation), without passing the response around.

Each HTTP request gets a fresh dict in a context variable
(:class:`~.http.notes.NotesMiddleware` sets it); the tasks the request starts copy
the context and so share that dict; :func:`add_header` writes into it, and the
middleware adds its entries to the response's headers when they go out. A header
noted after the response started (a stream that began while its model was loading)
is not sent. No HTTP here: the engine notes headers through this module.
"""

from __future__ import annotations

from contextvars import ContextVar

NOTES: ContextVar[dict[str, str] | None] = ContextVar("response_notes", default=None)


def add_header(name: str, value: str) -> None:
    """Send ``name: value`` with the current request's response (if it has not started)."""
    notes = NOTES.get()
    if notes is not None:
        notes[name.lower()] = value
