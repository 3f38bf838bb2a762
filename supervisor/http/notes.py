"""The middleware that sends the response headers noted with
:func:`mlx_gateway.supervisor.notes.add_header` (see there)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlx_gateway.supervisor.notes import NOTES


class NotesMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        notes: dict[str, str] = {}
        token = NOTES.set(notes)

        async def send_with_notes(message: Message) -> None:
            if message["type"] == "http.response.start" and notes:
                headers = list(message.get("headers", []))
                headers += [(k.encode(), v.encode()) for k, v in notes.items()]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_notes)
        finally:
            NOTES.reset(token)
