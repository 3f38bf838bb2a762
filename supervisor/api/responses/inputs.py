"""A Responses API body as the turn it asks for: the stored conversation it
continues, its new input items as chat messages, its tools, sampling and output
format. Shared by the response itself and ``/v1/responses/input_tokens``, so both
render exactly the same prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlx_gateway.supervisor.api.responses.convert import loaded_names, to_chat
from mlx_gateway.supervisor.api.responses.schemas import (
    FunctionToolChoice,
    McpApprovalResponse,
    McpToolChoice,
    ResponsesRequest,
    TextFormatJsonObject,
    TextFormatJsonSchema,
    input_items,
)
from mlx_gateway.supervisor.api.responses.tools import RequestTools, flat_name, request_tools
from mlx_gateway.supervisor.engine.requests import SamplingFields
from mlx_gateway.supervisor.engine.thinking import from_effort
from mlx_gateway.supervisor.engine.tools import OutputSpec, ToolSpec, checked_spec
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http.response_store import ResponseStore
from mlx_gateway.supervisor.reply.serve import SEPARATOR, ApprovedCall, Ask


@dataclass
class ResponseInput:
    ask: Ask
    """The turn the request asks for."""
    items: list[Any]
    """The request's input items."""
    earlier: list[dict[str, Any]]
    """The conversation of ``previous_response_id`` (chat messages)."""
    new_messages: list[dict[str, Any]]
    tools: RequestTools


_PARAMS = {"messages": "input", "max_tokens": "max_output_tokens"}
"""The engine's names of request fields (chat completions') → this API's."""

LOGPROBS_INCLUDE = "message.output_text.logprobs"


def response_input(req: ResponsesRequest, store: ResponseStore, endpoint: str) -> ResponseInput:
    """Check and convert ``req``'s input (and the conversation it continues)."""
    items = input_items(req.input)
    earlier: list[dict[str, Any]] = []
    previous = None
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
    earlier_output = previous.response["output"] if previous else []
    searched = loaded_names(items) + [
        t["name"]
        for o in earlier_output
        if o.get("type") == "tool_search_output"
        for t in o.get("tools") or []
    ]
    tools = request_tools(req.tools, set(searched))
    choice = req.tool_choice
    server_choice: str | None = None
    if isinstance(choice, FunctionToolChoice):
        named: str = flat_name(choice.namespace, choice.name)
    elif isinstance(choice, McpToolChoice):
        named = "required" if choice.name is None else "auto"
        if choice.name is not None:
            server_choice = f"{choice.server_label}{SEPARATOR}{choice.name}"
    elif choice is not None and not isinstance(choice, str):  # web_search(_preview)
        named, server_choice = "auto", "web_search"
    else:
        named = choice or "auto"
    if named == "required" and not tools.functions and tools.server:
        spec = ToolSpec([], "required", req.parallel_tool_calls is not False)
    else:
        spec = checked_spec(tools.functions, named, req.parallel_tool_calls, "tool_choice")
    system = [{"role": "system", "content": req.instructions}] if req.instructions else []
    effort = req.reasoning.effort if req.reasoning else None
    thinking = from_effort(effort, req.enable_thinking, req.thinking_budget)
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
        service_tier=req.service_tier,
        user=req.user,
        prompt_cache_key=req.prompt_cache_key,
    )
    logprobs = LOGPROBS_INCLUDE in (req.include or [])
    ask = Ask(
        model=req.model,
        endpoint=endpoint,
        id_prefix="resp_",
        sampling=fields,
        messages=[*system, *earlier, *new_messages],
        keep_alive=req.keep_alive,
        ttl=req.ttl,
        chat_template_kwargs=req.chat_template_kwargs,
        enable_thinking=thinking.enabled,
        thinking_budget=thinking.budget,
        tools=spec,
        output=_output_spec(req),
        logprobs=(req.top_logprobs or 0) if logprobs else None,
        logprobs_param="include",
        adapter=req.adapter,
        server_tools=tools.server,
        server_choice=server_choice,
        approved=_approved(items, earlier_output),
        params=_PARAMS,
    )
    return ResponseInput(ask, items, earlier, new_messages, tools)


def _output_spec(req: ResponsesRequest) -> OutputSpec:
    fmt = req.text.format if req.text else None
    if isinstance(fmt, TextFormatJsonObject):
        return OutputSpec("json_object", None, "text.format")
    if isinstance(fmt, TextFormatJsonSchema):
        return OutputSpec("json_schema", fmt.schema, "text.format.schema")
    return OutputSpec()


def _approved(items: list[Any], earlier_output: list[dict[str, Any]]) -> list[ApprovedCall]:
    """The client's answers to the approval requests of the response it continues."""
    asked = {o["id"]: o for o in earlier_output if o.get("type") == "mcp_approval_request"}
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, McpApprovalResponse):
            continue
        request = asked.get(item.approval_request_id)
        if request is None:
            raise BadRequest(
                f"Invalid value for 'input[{i}].approval_request_id': "
                f"'{item.approval_request_id}' is no approval request of the response named "
                "by previous_response_id.",
                param=f"input[{i}].approval_request_id",
            )
        name = f"{request['server_label']}{SEPARATOR}{request['name']}"
        out.append(
            ApprovedCall(request["id"], name, request["arguments"], item.approve, item.reason)
        )
    return out
