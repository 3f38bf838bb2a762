"""Request bodies of the Responses API (``POST /v1/responses``) as msgspec Structs.

``input`` items are checked one by one (:func:`input_items`), because a message
item may leave out its ``type``; the other fields are checked by decoding, so a
wrong shape is a 400 naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from mlx_gateway.supervisor.engine.requests import (
    MaxTokens,
    MinP,
    Penalty,
    RepetitionPenalty,
    ServiceTier,
    Temperature,
    ThinkingBudget,
    TopK,
    TopP,
)
from mlx_gateway.supervisor.engine.tools import FunctionName
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.http import validation_error

Seed = Annotated[int, Meta(ge=0, le=2**63 - 1)]


class ResponsesFunctionTool(Struct, tag="function", tag_field="type"):
    name: FunctionName
    parameters: dict[str, Any] | None = None
    description: str | None = None
    strict: bool | None = None
    defer_loading: bool | None = None


class FunctionToolChoice(Struct, tag="function", tag_field="type"):
    name: FunctionName
    namespace: str | None = None


class McpToolChoice(Struct, tag="mcp", tag_field="type"):
    """``{"type": "mcp", "server_label": …, "name": …}``: call that server's tool
    (any of its tools without ``name``)."""

    server_label: str
    name: str | None = None


class WebSearchToolChoice(Struct, tag="web_search", tag_field="type"):
    pass


class WebSearchPreviewToolChoice(Struct, tag="web_search_preview", tag_field="type"):
    pass


class TextFormatText(Struct, tag="text", tag_field="type"):
    pass


class TextFormatJsonObject(Struct, tag="json_object", tag_field="type"):
    pass


class TextFormatJsonSchema(Struct, tag="json_schema", tag_field="type"):
    name: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_\-]{1,64}$")]
    schema: dict[str, Any]
    description: str | None = None
    strict: bool | None = None


class TextConfig(Struct):
    format: TextFormatText | TextFormatJsonObject | TextFormatJsonSchema | None = None
    verbosity: str | None = None


class ReasoningConfig(Struct):
    effort: str | None = None
    summary: str | None = None


class ResponsesRequest(Struct, kw_only=True):
    """``POST /v1/responses``."""

    model: str
    input: str | list[dict[str, Any]]
    instructions: str | None = None
    previous_response_id: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: (
        Literal["none", "auto", "required"]
        | FunctionToolChoice
        | McpToolChoice
        | WebSearchToolChoice
        | WebSearchPreviewToolChoice
        | None
    ) = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    max_output_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=20)] | None = None
    include: list[str] | None = None
    stream: bool = False
    store: bool = True
    metadata: dict[str, str] | None = None
    user: str | None = None
    prompt_cache_key: str | None = None
    truncation: Literal["auto", "disabled"] | None = None
    service_tier: ServiceTier | None = None
    """``flex``: batch work (see chat completions)."""
    # Sampling extensions, as for chat completions.
    top_k: TopK | None = None
    min_p: MinP | None = None
    seed: Seed | None = None
    repetition_penalty: RepetitionPenalty | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    enable_thinking: bool | None = None
    """The chat template's ``enable_thinking`` (wins over ``reasoning.effort``)."""
    thinking_budget: ThinkingBudget | None = None
    """Most tokens inside a thinking block (wins over ``reasoning.effort``'s)."""
    adapter: str | None = None
    """Extension: LoRA adapters of the model (``"id"``, ``"a+b"``, ``"none"``)."""
    keep_alive: float | str | None = None
    """Extension (Ollama's): how long the model stays loaded after this request."""
    ttl: float | None = None
    """Extension (LM Studio's): seconds the model stays loaded after this request."""


# ---------------------------------------------------------------- input items


class InputText(Struct, tag="input_text", tag_field="type"):
    text: str


class OutputText(Struct, tag="output_text", tag_field="type", forbid_unknown_fields=False):
    text: str


class InputImage(Struct, tag="input_image", tag_field="type"):
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["auto", "low", "high"] = "auto"


class VideoURLObject(Struct):
    url: str


class InputVideo(Struct, tag="input_video", tag_field="type"):
    """A video (vision models; the peers' part name): its URL in ``video_url`` or
    ``video``, a string or ``{"url": …}``."""

    video_url: str | VideoURLObject | None = None
    video: str | VideoURLObject | None = None


class InputFile(Struct, tag="input_file", tag_field="type"):
    """A document (PDF or text): ``file_data`` (a data: URL or base64) with its
    ``filename``, or ``file_url`` (fetched); ``file_id`` is refused (no Files API)."""

    file_data: str | None = None
    file_url: str | None = None
    filename: str | None = None
    file_id: str | None = None


class Refusal(Struct, tag="refusal", tag_field="type"):
    refusal: str


ContentPart = InputText | OutputText | InputImage | InputVideo | InputFile | Refusal


class MessageItem(Struct, kw_only=True):
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]
    type: Literal["message"] = "message"
    id: str | None = None
    status: str | None = None


class FunctionCallItem(Struct, kw_only=True):
    call_id: str
    name: str
    arguments: str
    type: Literal["function_call"] = "function_call"
    namespace: str | None = None
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(Struct, kw_only=True):
    call_id: str
    output: str | list[ContentPart]
    type: Literal["function_call_output"] = "function_call_output"
    id: str | None = None
    status: str | None = None


class ReasoningItem(Struct, kw_only=True):
    id: str | None = None
    summary: list[dict[str, Any]] = []
    content: list[dict[str, Any]] | None = None
    type: Literal["reasoning"] = "reasoning"
    encrypted_content: str | None = None
    status: str | None = None


class ServerToolItem(Struct, kw_only=True):
    """An item of a tool the server ran (``web_search_call``, ``mcp_call``,
    ``mcp_list_tools``, ``tool_search_call`` and ``tool_search_output``), sent back
    in the input as clients keep their history: its call and result go to the
    prompt as a tool call and its answer."""

    type: str
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    server_label: str | None = None
    arguments: str | dict[str, Any] | None = None
    """JSON text (``mcp_call``), an object (``tool_search_call``)."""
    tools: list[dict[str, Any]] | None = None
    """The tools a ``tool_search_output`` loaded."""
    output: str | None = None
    error: Any = None
    action: dict[str, Any] | None = None
    status: str | None = None


class McpApprovalResponse(Struct, kw_only=True):
    """``mcp_approval_response``: the client's answer to an ``mcp_approval_request``."""

    approval_request_id: str
    approve: bool
    id: str | None = None
    reason: str | None = None
    type: Literal["mcp_approval_response"] = "mcp_approval_response"


InputItem = (
    MessageItem
    | FunctionCallItem
    | FunctionCallOutputItem
    | ReasoningItem
    | ServerToolItem
    | McpApprovalResponse
)

_ITEM_TYPES: dict[str, type[Any]] = {
    "message": MessageItem,
    "function_call": FunctionCallItem,
    "function_call_output": FunctionCallOutputItem,
    "reasoning": ReasoningItem,
    "web_search_call": ServerToolItem,
    "mcp_call": ServerToolItem,
    "mcp_list_tools": ServerToolItem,
    "mcp_approval_request": ServerToolItem,
    "tool_search_call": ServerToolItem,
    "tool_search_output": ServerToolItem,
    "mcp_approval_response": McpApprovalResponse,
}


def input_items(raw: str | list[dict[str, Any]]) -> list[InputItem]:
    """The request's ``input`` as typed items (a string is one user message)."""
    if isinstance(raw, str):
        return [MessageItem(role="user", content=raw)]
    items: list[InputItem] = []
    for i, item in enumerate(raw):
        kind = item.get("type", "message")
        item_type = _ITEM_TYPES.get(kind) if isinstance(kind, str) else None
        if item_type is None:
            raise BadRequest(
                f"Invalid value for 'input[{i}].type': {kind!r} is not supported here "
                f"(supported: {', '.join(_ITEM_TYPES)}).",
                param=f"input[{i}].type",
            )
        try:
            items.append(msgspec.convert(item, item_type))
        except msgspec.ValidationError as exc:
            error = validation_error(str(exc))
            inner = error.param or ""
            param = f"input[{i}]" + (f".{inner}" if inner and not inner.startswith("[") else inner)
            raise BadRequest(
                error.message.replace(f"'{inner}'", f"'{param}'"), param=param
            ) from None
    return items
