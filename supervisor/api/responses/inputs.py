"""A Responses API body as the worker gets it: the stored conversation it continues,
its new input items as chat messages (images read), its tools, the chat template's
variables. Shared by the response itself and ``/v1/responses/input_tokens``, so
both render exactly the same prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from mlx_gateway.supervisor.api.responses.convert import to_chat
from mlx_gateway.supervisor.api.responses.schemas import (
    FunctionToolChoice,
    ResponsesRequest,
    input_items,
)
from mlx_gateway.supervisor.api.responses.store import ResponseStore
from mlx_gateway.supervisor.api.responses.tools import RequestTools, flat_name, request_tools
from mlx_gateway.supervisor.engine.conversation import for_template
from mlx_gateway.supervisor.engine.thinking import Thinking, from_effort
from mlx_gateway.supervisor.engine.tools import ToolSpec, checked_spec
from mlx_gateway.supervisor.engine.turns import template_kwargs
from mlx_gateway.supervisor.engine.vision_input import ImageInputs
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.reply.inputs import prepare_images


@dataclass
class ResponseInput:
    items: list[Any]
    """The request's input items."""
    earlier: list[dict[str, Any]]
    """The conversation of ``previous_response_id`` (chat messages)."""
    new_messages: list[dict[str, Any]]
    tools: RequestTools
    spec: ToolSpec
    inputs: ImageInputs
    thinking: Thinking
    kwargs: dict[str, Any]


async def response_input(
    request: Request, req: ResponsesRequest, handle: ModelHandle, store: ResponseStore
) -> ResponseInput:
    """Check and convert ``req``'s input (and the conversation it continues)."""
    items = input_items(req.input)
    earlier: list[dict[str, Any]] = []
    if req.previous_response_id is not None:
        previous = store.get(req.previous_response_id)
        if previous is None:
            raise BadRequest(
                f"Previous response with id '{req.previous_response_id}' not found (it "
                "expired, was deleted, or was created with store: false).",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        earlier = previous.conversation
    new_messages = to_chat(items)
    tools = request_tools(req.tools)
    choice = req.tool_choice
    spec = checked_spec(
        tools.functions,
        flat_name(choice.namespace, choice.name)
        if isinstance(choice, FunctionToolChoice)
        else choice or "auto",
        req.parallel_tool_calls,
        "tool_choice",
    )
    system = [{"role": "system", "content": req.instructions}] if req.instructions else []
    inputs = await prepare_images(request, handle, for_template([*system, *earlier, *new_messages]))
    effort = req.reasoning.effort if req.reasoning else None
    thinking = from_effort(effort, req.enable_thinking, req.thinking_budget)
    kwargs = template_kwargs(req.chat_template_kwargs, spec, thinking.enabled)
    return ResponseInput(items, earlier, new_messages, tools, spec, inputs, thinking, kwargs)
