"""Response headers that code deep below a route adds (the context-overflow policy
saying it shortened the conversation), without passing the response around.

:class:`NotesMiddleware` gives each HTTP request a fresh dict in a context
variable; the tasks the request starts copy the context and so share that dict;
:func:`add_header` writes into it, and the middleware adds its entries to the
response's headers when they go out. A header noted after the response started
(a stream that began while its model was loading) is not sent.
"""

from __future__ import annotations

from contextvars import ContextVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_notes: ContextVar[dict[str, str] | None] = ContextVar("response_notes", default=None)


def add_header(name: str, value: str) -> None:
    """Send ``name: value`` with the current request's response (if it has not started)."""
    notes = _notes.get()
    if notes is not None:
        notes[name.lower()] = value


class NotesMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        notes: dict[str, str] = {}
        token = _notes.set(notes)

        async def send_with_notes(message: Message) -> None:
            if message["type"] == "http.response.start" and notes:
                headers = list(message.get("headers", []))
                headers += [(k.encode(), v.encode()) for k, v in notes.items()]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_notes)
        finally:
            _notes.reset(token)
