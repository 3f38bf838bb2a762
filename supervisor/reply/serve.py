"""The one serve of every text surface: from an :class:`~...engine.ask.Ask` to the
HTTP response, once for all of them.

A surface decodes its request, turns it into an ``Ask`` (its *into* half) and
names its :class:`Reply` (its *out* half); :func:`serve` does the rest in one
order: resolve the model's name, check its kind (narrowed once to a
:class:`~...engine.ask.TextModel`), record the request's ``keep_alive`` or
``ttl``, read its inputs (images, audio), build and check the turn, start it
while watching the client, then stream it or answer it whole. A stream that has
not started within the grace period shows the load's progress
(:mod:`.loading`); a whole answer that takes long gets its headers early and
whitespace until it is ready (:mod:`.answer`), is computed once more on the
model's next worker when its worker died, and ends with the surface's own
error object when it cannot be answered.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any
from uuid import uuid4

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.engine.ask import (
    Ask,
    TextModel,
    conversation,
    text_model,
)
from mlx_gateway.supervisor.engine.keep_alive import client_lifetime
from mlx_gateway.supervisor.engine.kinds import CHAT_KINDS, COMPLETION_KINDS
from mlx_gateway.supervisor.engine.media_walk import MediaInputs
from mlx_gateway.supervisor.engine.overflow import count_tokens
from mlx_gateway.supervisor.engine.prompt_parts import parts_of
from mlx_gateway.supervisor.engine.server_tools import (
    SEPARATOR,
    ApprovedCall,
    ServerToolApproval,
    ServerToolCall,
    ServerToolResult,
    ServerToolsListed,
    ServerToolSpec,
)
from mlx_gateway.supervisor.engine.tool_search import NAME as TOOL_SEARCH
from mlx_gateway.supervisor.engine.tool_search import spec_function
from mlx_gateway.supervisor.engine.turns import (
    ChoiceResult,
    Finished,
    ReasoningDelta,
    TextDelta,
    ToolCallMade,
    Turn,
    TurnEvent,
    template_kwargs,
)
from mlx_gateway.supervisor.errors import GatewayError, WorkerCrashed
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.caller import ANONYMOUS, Caller, caller_of
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.http.error_body import openai_error_body
from mlx_gateway.supervisor.http.keepalive import comment_event, keepalive_for, ping_event
from mlx_gateway.supervisor.http.replies import JSONResponse
from mlx_gateway.supervisor.pool.keep_alive import lifetime, request_started
from mlx_gateway.supervisor.reply.answer import json_answer
from mlx_gateway.supervisor.reply.inputs import prepare_images
from mlx_gateway.supervisor.reply.loading import openai_failure, start_stream
from mlx_gateway.supervisor.reply.opening import Opening, prepare
from mlx_gateway.supervisor.reply.priority import priority_of
from mlx_gateway.supervisor.reply.routed import Routed, choose
from mlx_gateway.supervisor.reply.streaming import relay
from mlx_gateway.supervisor.tools import McpServers

__all__ = [  # what a dialect is written against, besides the serve itself
    "CHAT_KINDS",
    "COMPLETION_KINDS",
    "SEPARATOR",
    "TOOL_SEARCH",
    "ApprovedCall",
    "Ask",
    "ChoiceReply",
    "ChoiceResult",
    "Finished",
    "McpServers",
    "ReasoningDelta",
    "Reply",
    "ServerToolApproval",
    "ServerToolCall",
    "ServerToolResult",
    "ServerToolSpec",
    "ServerToolsListed",
    "TextDelta",
    "TextModel",
    "ToolCallMade",
    "Turn",
    "TurnEvent",
    "count",
    "open_turn",
    "relay",
    "serve",
    "text_model",
    "warm",
]

logger = logging.getLogger(__name__)

API_EVENT_SECONDS = 30.0
"""After how long without an event a quiet stream's keep-alive is the API's own
event (:meth:`Reply.alive`) rather than a comment or ping: often enough for a
client watchdog of 300 s (Claude Code, Codex CLI), and rarely, because Claude Code
adds a message's usage to its session totals at every ``message_delta``."""

NDJSON = "application/x-ndjson"


class Reply:
    """The out half of a dialect: a started turn as the surface's stream frames
    (:meth:`events`) or its whole body (:meth:`whole`), and its words for a failure.

    Both halves close the turn however they end. :meth:`whole` may be called a
    second time with a new turn (the first one's worker died after the answer's
    headers went out), so it builds its body from that turn alone."""

    ping = False
    """Whether a quiet stream's keep-alive is Anthropic's ``event: ping`` (else an
    SSE comment)."""
    ndjson = False
    """Whether the stream is NDJSON lines (Ollama's): it starts once the turn did,
    and has no keep-alives (a line that is not JSON would break its clients)."""
    padded = True
    """Whether a whole answer that takes long gets its headers early and spaces until
    it is ready (:mod:`.answer`). Ollama's clients wait without a time limit and read
    a 200 as an answer (an error object in it fails their parsing), so Ollama's is
    not: its failures stay HTTP errors."""

    def begin(self, model: TextModel, request_id: str) -> None:
        """Called once the model is known, before the turn starts: ``request_id``
        names the answer's object (``chatcmpl-…``)."""

    def events(self, running: Turn) -> AsyncIterator[bytes]:
        raise NotImplementedError

    async def whole(self, running: Turn) -> Any:
        raise NotImplementedError

    def failed(self, exc: GatewayError) -> bytes:
        """The end of a stream whose turn failed to start after its headers went out."""
        return openai_failure(exc)

    def error_body(self, exc: GatewayError) -> Any:
        """The error object that ends a whole answer whose headers went out (after
        the keep-alive spaces: :mod:`.answer`)."""
        return openai_error_body(exc)

    def alive(self) -> bytes:
        """The API's own do-nothing event for a long-quiet stream (``b""``: none)."""
        return b""


class ChoiceReply(Reply):
    """A :class:`Reply` built from the events of choice 0, one at a time: the
    Responses API's and Anthropic's builders, which write a stream event for each
    turn event and keep the whole body beside."""

    def opening(self, running: Turn) -> bytes | None:
        """The stream's first event."""
        return None

    def on(self, event: TurnEvent) -> bytes | None:
        """The stream bytes of one turn event (``None``: nothing to send yet); it
        also feeds the body that :meth:`body` returns."""
        raise NotImplementedError

    def broke(self, exc: GatewayError) -> Iterable[bytes]:
        """The end of a stream that failed after it began."""
        return [self.failed(exc)]

    def body(self) -> Any:
        raise NotImplementedError

    def finished(self) -> None:
        """Runs once the turn ended well (storing a response, say)."""

    async def events(self, running: Turn) -> AsyncIterator[bytes]:
        try:
            opening = self.opening(running)
            if opening:
                yield opening
            async for event in running.choice(0):
                chunk = self.on(event)
                if chunk:
                    yield chunk
            self.finished()
        except GatewayError as exc:
            logger.warning(
                "%s stream failed after it started: %s", running.handle.name, exc.message
            )
            for chunk in self.broke(exc):
                yield chunk
        finally:
            await running.aclose()

    async def whole(self, running: Turn) -> Any:
        # The body is fed once the turn ended: a turn run again starts it from nothing.
        try:
            events = [event async for event in running.choice(0)]
        finally:
            await running.aclose()
        for event in events:
            self.on(event)
        self.finished()
        return self.body()


def resolve(request: Request, ask: Ask, *, keep_alive: bool = True) -> TextModel:
    """The model ``ask`` names (a route's first, in its strategy's order), checked to
    serve its endpoint; its ``keep_alive`` (or ``ttl``) recorded unless told
    otherwise (counting tokens keeps nothing)."""
    gateway = gateway_of(request)
    model = choose(gateway.registry, ask).models[0]
    if keep_alive:
        client_lifetime(gateway.config.server, model.handle, ask.keep_alive, ask.ttl)
    return model


async def read_inputs(request: Request, model: TextModel, ask: Ask) -> MediaInputs | None:
    """The ask's messages with their images and audio read (unless the client
    leaves first); ``None`` for a raw prompt."""
    if ask.prompt is not None:
        return None
    return await prepare_images(request, model.handle, conversation(ask))


async def serve(request: Request, ask: Ask, reply: Reply, *, stream: bool) -> Response:
    """Answer ``ask`` as ``reply`` writes it: a stream, or one body. A route's
    request starts on the first of its models that starts (:mod:`.routed`)."""
    ask.priority = priority_of(request, ask.sampling.service_tier)
    gateway = gateway_of(request)
    choice = choose(gateway.registry, ask)
    request_id = recorder.name_request(ask.id_prefix)
    caller = caller_of(request.scope)  # the app: its tools, its server-tool call log

    async def open_on(model: TextModel) -> Opening:
        client_lifetime(gateway.config.server, model.handle, ask.keep_alive, ask.ttl)
        inputs = await read_inputs(request, model, ask)
        return await prepare(gateway.mcp, model, ask, inputs, request_id, caller)

    model = choice.models[0]
    if ask.prompt is None:
        parts = parts_of(ask.messages, ask.tools.functions, ask.part_labels)
        recorder.note_cache_parts(gateway.prompt_history.note(model.name, parts))
    opening = await open_on(model)
    reply.begin(model, request_id)
    routed = Routed(choice, opening, open_on, lambda served: reply.begin(served, request_id))
    start = routed.start

    if stream:
        return routed.name_on(await _stream(request, model, start, reply))
    running = await unless_disconnected(request, start())

    async def again() -> Any:
        return await reply.whole(await start())

    if not reply.padded:
        body = await _unpadded(request, reply.whole(running), again)
        return routed.name_on(JSONResponse(body))
    interval = keepalive_for(gateway.config.server).interval
    answer = await json_answer(request, reply.whole(running), interval, again, reply.error_body)
    return routed.name_on(answer)


async def _unpadded(
    request: Request, work: Awaitable[Any], again: Callable[[], Awaitable[Any]]
) -> Any:
    """A whole answer without early headers: computed once more on the model's next
    worker when its worker died (as a padded one is); any failure an HTTP error."""
    try:
        return await unless_disconnected(request, work)
    except WorkerCrashed as exc:
        logger.warning("an answer's worker died; computing it again: %s", exc.message)
    return await unless_disconnected(request, again())


async def _stream(
    request: Request, model: TextModel, start: Callable[[], Awaitable[Turn]], reply: Reply
) -> Response:
    starting = unless_disconnected(request, start())
    if reply.ndjson:
        running = await starting
        return StreamingResponse(_closing(reply.events(running), running), media_type=NDJSON)
    keepalive = dataclasses.replace(
        keepalive_for(gateway_of(request).config.server),
        event=ping_event if reply.ping else comment_event,
        alive=reply.alive,
        alive_every=API_EVENT_SECONDS,
    )
    return await start_stream(model.handle, starting, reply.events, keepalive, reply.failed)


async def _closing(events: AsyncIterator[bytes], running: Turn) -> AsyncIterator[bytes]:
    try:
        async for chunk in events:
            yield chunk
    finally:
        with contextlib.suppress(BaseException):
            await running.aclose()


async def count(request: Request, ask: Ask) -> int:
    """The prompt tokens of ``ask``, counted by the model's worker with its own
    tokenizer and chat template, exactly as the turn would render them (a tool
    search with its deferred tools' names; other server tools are not counted)."""
    model = resolve(request, ask, keep_alive=False)
    inputs = await read_inputs(request, model, ask)
    assert inputs is not None, "a raw prompt is not counted here"
    tools = ask.tools
    searches = [spec_function(s) for s in ask.server_tools if s.kind == "tool_search"]
    if searches:  # rendered as the turn renders them: the deferred tools by name only
        tools = dataclasses.replace(tools, functions=[*tools.functions, *searches])
    kwargs = template_kwargs(ask.chat_template_kwargs, tools, ask.enable_thinking)
    work = count_tokens(model.handle, inputs.messages, kwargs, inputs.files, inputs.frame_indices)
    tokens: int = await unless_disconnected(request, work)
    return tokens


async def warm(request: Request, ask: Ask) -> str:
    """A request with nothing to answer (Ollama's way to load a model, or with
    ``keep_alive`` 0 to unload it): ``load`` once the model is loaded, or
    ``unload`` once it was stopped (if idle)."""
    model = resolve(request, ask)
    handle = model.handle
    request_started(handle)  # no session: its keep_alive applies here
    if lifetime(handle) == 0:
        stop = getattr(handle, "stop", None)
        if stop is not None and handle.status().state == "ready":
            await stop("keep_alive 0: unloaded by an empty request", if_idle=True)
        return "unload"
    load = getattr(handle, "load", None)
    if load is not None:
        await unless_disconnected(request, load())
    return "load"


async def open_turn(
    mcp: McpServers, model: TextModel, ask: Ask, caller: Caller = ANONYMOUS
) -> Turn:
    """``ask`` started on ``model`` outside of an HTTP request (a Realtime session's
    response, the MCP server's ``ask``), as the serve starts it: built, checked, with
    the server tools in the ``caller``'s scope (run on the config's servers ``mcp``)."""
    request_id = f"{ask.id_prefix}{uuid4().hex}"
    opening = await prepare(mcp, model, ask, None, request_id, caller)
    return await opening.start()
