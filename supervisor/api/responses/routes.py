"""The Responses API: ``POST /v1/responses``, ``GET``/``DELETE /v1/responses/{id}``
and ``GET /v1/responses/{id}/input_items``.

A request's input (a string or a list of items) plus, with
``previous_response_id``, the stored conversation it continues, becomes one turn
of the model; its reasoning, text and function calls become output items (see
:mod:`.responses_events` for the stream). Responses are stored unless ``store`` is
false (see :mod:`.response_store`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.api.responses.convert import new_id, output_items, stored_input, to_chat
from mlx_gateway.supervisor.api.responses.events import ResponseBuilder
from mlx_gateway.supervisor.api.responses.inputs import response_input
from mlx_gateway.supervisor.api.responses.schemas import (
    FunctionToolChoice,
    ResponsesRequest,
    TextFormatJsonObject,
    TextFormatJsonSchema,
)
from mlx_gateway.supervisor.api.responses.store import ResponseStore
from mlx_gateway.supervisor.engine.adapters import adapters_for
from mlx_gateway.supervisor.engine.keep_alive import client_lifetime
from mlx_gateway.supervisor.engine.kinds import CHAT_KINDS, require_kind
from mlx_gateway.supervisor.engine.overflow import count_tokens
from mlx_gateway.supervisor.engine.requests import SamplingFields
from mlx_gateway.supervisor.engine.sampling import sampling_params
from mlx_gateway.supervisor.engine.tools import OutputSpec
from mlx_gateway.supervisor.engine.turns import Turn, TurnRequest, check_turn
from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.http.body import read_json
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.http.keepalive import keepalive_for
from mlx_gateway.supervisor.http.replies import JSONResponse
from mlx_gateway.supervisor.reply.turn import serve_turn

logger = logging.getLogger(__name__)

LOGPROBS_INCLUDE = "message.output_text.logprobs"


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"


def response_store(request: Request) -> ResponseStore:
    """The app's store, made on first use from the server settings."""
    state = request.app.state
    store = getattr(state, "response_store", None)
    if store is None:
        server = state.config.server
        store = ResponseStore(server.response_store_ttl, int(server.response_store_mb * 1024**2))
        state.response_store = store
    return store


def _output_spec(req: ResponsesRequest) -> OutputSpec:
    fmt = req.text.format if req.text else None
    if isinstance(fmt, TextFormatJsonObject):
        return OutputSpec("json_object", None, "text.format")
    if isinstance(fmt, TextFormatJsonSchema):
        return OutputSpec("json_schema", fmt.schema, "text.format.schema")
    return OutputSpec()


def _skeleton(req: ResponsesRequest, name: str, tools: list[Any]) -> dict[str, Any]:
    """The response object's fields that come from the request."""
    choice: Any = req.tool_choice or "auto"
    if isinstance(choice, FunctionToolChoice):
        named = choice
        choice = {"type": "function", "name": named.name}
        if named.namespace is not None:
            choice["namespace"] = named.namespace
    fmt: dict[str, Any] = {"type": "text"}
    if req.text and req.text.format is not None:
        fmt = {"type": type(req.text.format).__struct_config__.tag}
        if isinstance(req.text.format, TextFormatJsonSchema):
            spec = req.text.format
            fmt |= {"name": spec.name, "schema": spec.schema, "strict": bool(spec.strict)}
            if spec.description:
                fmt["description"] = spec.description
    return {
        "id": new_id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "model": name,
        "error": None,
        "incomplete_details": None,
        "instructions": req.instructions,
        "max_output_tokens": req.max_output_tokens,
        "metadata": req.metadata or {},
        "parallel_tool_calls": True if req.parallel_tool_calls is None else req.parallel_tool_calls,
        "previous_response_id": req.previous_response_id,
        "reasoning": {
            "effort": req.reasoning.effort if req.reasoning else None,
            "summary": None,
        },
        "store": req.store,
        "temperature": req.temperature,
        "text": {"format": fmt},
        "tool_choice": choice,
        "tools": tools,
        "top_p": req.top_p,
        "top_logprobs": req.top_logprobs,
        "truncation": req.truncation or "disabled",
        "user": req.user,
    }


async def count_input_tokens(request: Request) -> Response:
    """``POST /v1/responses/input_tokens``: the prompt tokens of a Responses body
    (instructions, the conversation of ``previous_response_id``, tools and images
    included), counted by the worker as the response would be."""
    req = await read_json(request, ResponsesRequest)
    handle = request.app.state.registry.resolve(req.model)
    require_kind(handle, CHAT_KINDS, "/v1/responses/input_tokens")
    given = await response_input(request, req, handle, response_store(request))
    inputs = given.inputs
    work = count_tokens(handle, inputs.messages, given.kwargs, inputs.files, inputs.frame_indices)
    tokens = await unless_disconnected(request, work)
    return JSONResponse({"object": "response.input_tokens", "input_tokens": tokens})


async def create_response(request: Request) -> Response:
    """Validate, resolve the model, run the turn; answer as JSON or as an event stream."""
    req = await read_json(request, ResponsesRequest)
    handle = request.app.state.registry.resolve(req.model)
    client_lifetime(request.app.state, handle, req.keep_alive, req.ttl)
    require_kind(handle, CHAT_KINDS, "/v1/responses")
    store = response_store(request)
    given = await response_input(request, req, handle, store)
    items, earlier, new_messages = given.items, given.earlier, given.new_messages
    tools, spec, inputs, thinking = given.tools, given.spec, given.inputs, given.thinking
    fields = SamplingFields(
        model=req.model,
        max_tokens=req.max_output_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=req.top_k,
        min_p=req.min_p,
        seed=req.seed,
        repetition_penalty=req.repetition_penalty,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
    )
    logprobs = LOGPROBS_INCLUDE in (req.include or [])
    turn = TurnRequest(
        messages=inputs.messages,
        sampling=sampling_params(fields, handle.config),
        template_kwargs=given.kwargs,
        thinking_budget=thinking.budget,
        adapters=adapters_for(handle, req.adapter),
        tools=spec,
        output=_output_spec(req),
        logprobs=(req.top_logprobs or 0) if logprobs else None,
        files=inputs.files,
        images=inputs.frame_indices,
    )
    check_turn(handle, turn, logprobs_param="include")
    skeleton = _skeleton(req, handle.name, tools.listing)
    builder = ResponseBuilder(skeleton, stream=req.stream, logprobs=logprobs, origin=tools.origin)

    def keep() -> None:
        if req.store:
            response = builder.response
            conversation = [*earlier, *new_messages, *to_chat(output_items(response["output"]))]
            store.put(response, stored_input(items), conversation)

    def broke(exc: GatewayError) -> list[bytes]:
        return [
            builder.error(exc.message, exc.code, exc.param),
            builder.fail(exc.message, exc.code),
        ]

    return await serve_turn(
        request,
        handle,
        lambda: _start(handle, turn, skeleton["id"]),
        stream=req.stream,
        keepalive=keepalive_for(request.app.state),
        opening=lambda running: builder.opening(),
        on=builder.on,
        broke=broke,
        body=lambda: builder.response,
        finished=keep,
        alive=builder.keepalive,
    )


_PARAMS = {"messages": "input", "max_tokens": "max_output_tokens"}
"""The workers' names of request fields (chat completions') → this API's."""


async def _start(handle: Any, turn: TurnRequest, request_id: str) -> Turn:
    """:meth:`Turn.start`, with a rejection worded in this API's field names (a
    prompt beyond the context is about ``input``, not ``messages``)."""
    try:
        return await Turn.start(handle, turn, request_id)
    except GatewayError as exc:
        if exc.code == "context_length_exceeded":
            for word in ("the", "your"):
                exc.message = exc.message.replace(f"{word} messages", f"{word} input")
        if exc.param in _PARAMS:
            exc.param = _PARAMS[exc.param]
        raise


def _stored(request: Request) -> Any:
    response_id = request.path_params["response_id"]
    entry = response_store(request).get(response_id)
    if entry is None:
        raise NotFound(
            f"Response with id '{response_id}' not found.", param="response_id", code="not_found"
        )
    return entry


async def retrieve_response(request: Request) -> Response:
    """``GET /v1/responses/{id}``: a stored response as it was sent."""
    return JSONResponse(_stored(request).response)


async def delete_response(request: Request) -> Response:
    """``DELETE /v1/responses/{id}``."""
    entry = _stored(request)
    response_store(request).delete(entry.response["id"])
    return JSONResponse({"id": entry.response["id"], "object": "response", "deleted": True})


async def list_input_items(request: Request) -> Response:
    """``GET /v1/responses/{id}/input_items``: the input items of a stored response
    (``order`` ``desc`` by default, as OpenAI lists them; ``limit`` 1 to 100)."""
    items = list(_stored(request).input_items)
    if request.query_params.get("order", "desc") == "desc":
        items.reverse()
    try:
        limit = int(request.query_params.get("limit", "20"))
    except ValueError:
        raise BadRequest("'limit' must be a whole number.", param="limit") from None
    if not 1 <= limit <= 100:
        raise BadRequest("'limit' must be between 1 and 100.", param="limit")
    after = request.query_params.get("after")
    if after is not None:
        ids = [item["id"] for item in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    page = items[:limit]
    return JSONResponse(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }
    )
