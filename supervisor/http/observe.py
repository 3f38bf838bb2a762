"""The observing middleware: times every HTTP request, counts it by route and
status, and commits what the request code noted (:mod:`.recorder`) when the
response ends — for a stream, after its last event or the client's departure.
Every answer carries the request's id in ``X-Request-Id``, and the request is
listed in ``GET /v1/requests`` while it runs."""

from __future__ import annotations

import time

from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlx_gateway.supervisor.http.caller import caller_of
from mlx_gateway.supervisor.recorder import Recorder, close_record, open_record


def route_label(scope: Scope) -> str:
    """The matched route's path template (bounded cardinality), or ``unmatched``."""
    route = scope.get("route")
    path = getattr(route, "path", None) if isinstance(route, BaseRoute) else None
    return path if isinstance(path, str) else "unmatched"


class ObserveMiddleware:
    """Feed ``recorder`` with every HTTP request; keep ``recorder.in_flight``."""

    def __init__(self, app: ASGIApp, *, recorder: Recorder) -> None:
        self.app = app
        self.recorder = recorder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # what the server answers when the app raises before a response

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", record.id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        client = scope.get("client")
        address = f"{client[0]}:{client[1]}" if client else ""
        record, token = open_record(scope.get("path", ""), address)
        self.recorder.in_flight += 1
        self.recorder.live[id(record)] = record
        try:
            await self.app(scope, receive, send_status)
        finally:
            self.recorder.in_flight -= 1
            self.recorder.live.pop(id(record), None)
            close_record(token)
            record.key = caller_of(scope).name
            route = record.route or route_label(scope)
            self.recorder.commit(record, route, status, time.monotonic())
