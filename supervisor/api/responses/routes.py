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

from mlx_gateway.supervisor.api.responses.convert import output_items, stored_input, to_chat
from mlx_gateway.supervisor.api.responses.events import ResponseBuilder
from mlx_gateway.supervisor.api.responses.inputs import ResponseInput, response_input
from mlx_gateway.supervisor.api.responses.schemas import (
    FunctionToolChoice,
    McpToolChoice,
    ResponsesRequest,
    TextFormatJsonSchema,
)
from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http import JSONResponse, read_json
from mlx_gateway.supervisor.http.response_store import ResponseStore
from mlx_gateway.supervisor.reply.serve import (
    ChoiceReply,
    TextModel,
    Turn,
    count,
    serve,
)

logger = logging.getLogger(__name__)


class NotFound(GatewayError):
    status = 404
    type = "invalid_request_error"


def response_store(request: Request) -> ResponseStore:
    """The app's store of responses (sized by the server settings)."""
    return gateway_of(request).responses


def _skeleton(req: ResponsesRequest, id: str, name: str, tools: list[Any]) -> dict[str, Any]:
    """The response object's fields that come from the request."""
    choice: Any = req.tool_choice or "auto"
    if isinstance(choice, FunctionToolChoice):
        named = choice
        choice = {"type": "function", "name": named.name}
        if named.namespace is not None:
            choice["namespace"] = named.namespace
    elif isinstance(choice, McpToolChoice):
        choice = {"type": "mcp", "server_label": choice.server_label, "name": choice.name}
    elif not isinstance(choice, str):  # a web search: the one hosted type the SDKs list
        choice = {"type": "web_search_preview"}
    fmt: dict[str, Any] = {"type": "text"}
    if req.text and req.text.format is not None:
        fmt = {"type": type(req.text.format).__struct_config__.tag}
        if isinstance(req.text.format, TextFormatJsonSchema):
            spec = req.text.format
            fmt |= {"name": spec.name, "schema": spec.schema, "strict": bool(spec.strict)}
            if spec.description:
                fmt["description"] = spec.description
    return {
        "id": id,
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
    given = response_input(req, response_store(request), "/v1/responses/input_tokens")
    tokens = await count(request, given.ask)
    return JSONResponse({"object": "response.input_tokens", "input_tokens": tokens})


async def create_response(request: Request) -> Response:
    """Validate, then answer as JSON or as an event stream."""
    req = await read_json(request, ResponsesRequest)
    store = response_store(request)
    given = response_input(req, store, "/v1/responses")
    reply = ResponseReply(req, given, store)
    return await serve(request, given.ask, reply, stream=req.stream)


class ResponseReply(ChoiceReply):
    """A turn as the Responses API's events or one ``response`` object, stored
    unless ``store`` is false."""

    def __init__(self, req: ResponsesRequest, given: ResponseInput, store: ResponseStore) -> None:
        self.req, self.given, self.store = req, given, store
        self.builder = self._builder("", "")

    def _builder(self, model: str, request_id: str) -> ResponseBuilder:
        req, given = self.req, self.given
        skeleton = _skeleton(req, request_id, model, given.tools.listing)
        logprobs = given.ask.logprobs is not None
        return ResponseBuilder(
            skeleton, stream=req.stream, logprobs=logprobs, origin=given.tools.origin
        )

    def begin(self, model: TextModel, request_id: str) -> None:
        self.builder = self._builder(model.name, request_id)

    def opening(self, running: Turn) -> bytes:
        return self.builder.opening()

    def on(self, event: Any) -> bytes | None:
        return self.builder.on(event)

    def body(self) -> Any:
        return self.builder.response

    def finished(self) -> None:
        if self.req.store:
            given, response = self.given, self.builder.response
            conversation = [*given.earlier, *given.new_messages]
            conversation += to_chat(output_items(response["output"]))
            self.store.put(response, stored_input(given.items), conversation)

    def broke(self, exc: GatewayError) -> list[bytes]:
        return [
            self.builder.error(exc.message, exc.code, exc.param),
            self.builder.fail(exc.message, exc.code),
        ]

    def alive(self) -> bytes:
        return self.builder.keepalive()


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
