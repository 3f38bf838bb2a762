"""The tail every chat-like API shares: a started turn relayed as a stream of that
API's events, or run to its end and answered as one JSON body.

The Responses API and Anthropic Messages each bring an event builder (the
callables below); this module owns the rest: the stream that starts at once or
after the model loaded (:func:`~.loading.start_stream`), a failure after the
stream began, closing the turn however the request ends, the client leaving
while a non-streamed answer is written, and the keep-alives: in a stream, once its
opening went out, after each :data:`API_EVENT_SECONDS` without an event the API's
own do-nothing event (``alive``) with the note, so that a client's watchdog that
sees only events stays fed; before a non-streamed answer, whitespace
(:mod:`.answer`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.engine.turns import Turn
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.http.error_body import openai_error_body
from mlx_gateway.supervisor.http.keepalive import KeepAlive
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.reply.answer import ErrorBodyOf, json_answer
from mlx_gateway.supervisor.reply.loading import openai_failure, start_stream

logger = logging.getLogger(__name__)

API_EVENT_SECONDS = 30.0
"""After how long without an event a quiet stream's keep-alive is the API's own
event (``alive``) rather than a comment or ping: often enough for a client
watchdog of 300 s (Claude Code, Codex CLI), and rarely, because Claude Code adds a
message's usage to its session totals at every ``message_delta``."""


async def serve_turn(
    request: Request,
    handle: ModelHandle,
    start: Callable[[], Awaitable[Turn]],
    *,
    stream: bool,
    keepalive: KeepAlive,
    opening: Callable[[Turn], bytes],
    on: Callable[[Any], bytes | None],
    broke: Callable[[GatewayError], Iterable[bytes]],
    body: Callable[[], Any],
    finished: Callable[[], None] = lambda: None,
    failed: Callable[[GatewayError], bytes] = openai_failure,
    error_body: ErrorBodyOf = openai_error_body,
    alive: Callable[[], bytes] = bytes,
) -> Response:
    """Answer one turn (choice 0) of the turn that ``start`` starts (called once, and
    once more for a non-streamed answer whose worker died after its headers went
    out: :mod:`.answer`).

    ``opening`` is the stream's first event, ``on`` turns each turn event into the
    API's stream bytes (or ``None``: nothing to send yet) and feeds the builder that
    ``body`` reads for a non-streamed answer; ``broke`` ends a stream that failed
    after it began, ``failed`` one that failed while its model was loading;
    ``finished`` runs once the turn ended well (storing a response, say);
    ``alive`` is the API's keep-alive event between the opening and the end
    (``b""`` outside), sent with the note instead of ``keepalive``'s own event
    once the stream sent no event for :data:`API_EVENT_SECONDS`."""
    starting = unless_disconnected(request, start())
    if stream:
        keepalive = dataclasses.replace(keepalive, alive=alive, alive_every=API_EVENT_SECONDS)

        async def events(running: Turn) -> AsyncIterator[bytes]:
            try:
                yield opening(running)
                async for event in running.choice(0):
                    chunk = on(event)
                    if chunk:
                        yield chunk
                finished()
            except GatewayError as exc:
                logger.warning("%s stream failed after it started: %s", handle.name, exc.message)
                for chunk in broke(exc):
                    yield chunk
            finally:
                await running.aclose()

        return await start_stream(handle, starting, events, keepalive, failed)
    running = await starting

    async def run(running: Turn) -> Any:
        # The builder is fed once the turn ended: a turn run again (see above)
        # starts it from nothing.
        try:
            events = [event async for event in running.choice(0)]
        finally:
            await running.aclose()
        for event in events:
            on(event)
        finished()
        return body()

    async def again() -> Any:
        return await run(await start())

    return await json_answer(request, run(running), keepalive.interval, again, error_body)
