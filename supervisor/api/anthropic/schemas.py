"""Request bodies of the Anthropic Messages API as msgspec Structs.

Decoding is the whole of type validation, as for the OpenAI endpoints: a wrong
shape is a 400 naming the field (rendered in Anthropic's error shape by the
handler). Unknown fields (``cache_control``, ``container``, ``mcp_servers``,
``service_tier``, beta fields) are accepted and ignored; ``context_management`` and
``output_config``, which Claude Code sends, are read only to be logged (at debug) as
ignored. A ``system`` message in ``messages`` decodes here and is allowed or refused
by the request's betas (:mod:`.betas`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from mlx_gateway.supervisor.engine.requests import MaxTokens, ThinkingBudget, TopK, TopP
from mlx_gateway.supervisor.engine.tools import FunctionName

Temperature = Annotated[float, Meta(ge=0.0, le=1.0)]


class Base64Source(Struct, tag="base64", tag_field="type"):
    media_type: str
    data: str


class URLSource(Struct, tag="url", tag_field="type"):
    url: str


class TextBlock(Struct, tag="text", tag_field="type"):
    text: str


class ImageBlock(Struct, tag="image", tag_field="type"):
    source: Base64Source | URLSource


class ToolUseBlock(Struct, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(Struct, tag="tool_result", tag_field="type"):
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock] = ""
    is_error: bool = False


class ThinkingBlock(Struct, tag="thinking", tag_field="type"):
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(Struct, tag="redacted_thinking", tag_field="type"):
    data: str


Block = (
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock
)


class AnthropicMessage(Struct):
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


class AnthropicTool(Struct):
    name: FunctionName
    input_schema: dict[str, Any]
    description: str | None = None
    type: Literal["custom"] | None = None


class ToolChoice(Struct):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class ThinkingConfig(Struct):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: ThinkingBudget | None = None


class MessagesRequest(Struct, kw_only=True):
    """``POST /v1/messages``."""

    model: str
    max_tokens: MaxTokens
    messages: Annotated[list[AnthropicMessage], Meta(min_length=1)]
    system: str | list[TextBlock] | None = None
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    enable_thinking: bool | None = None
    """Extension: the chat template's ``enable_thinking`` (wins over ``thinking``)."""
    thinking_budget: ThinkingBudget | None = None
    """Extension: most tokens inside a thinking block (wins over ``budget_tokens``)."""
    adapter: str | None = None
    """Extension: LoRA adapters of the model (``"id"``, ``"a+b"``, ``"none"``)."""
    keep_alive: float | str | None = None
    """Extension (Ollama's): how long the model stays loaded after this request."""
    ttl: float | None = None
    """Extension (LM Studio's): seconds the model stays loaded after this request."""
    metadata: dict[str, Any] | None = None
    context_management: Any = None
    output_config: Any = None


class CountTokensRequest(Struct, kw_only=True):
    """``POST /v1/messages/count_tokens``."""

    model: str
    messages: Annotated[list[AnthropicMessage], Meta(min_length=1)]
    system: str | list[TextBlock] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None
    context_management: Any = None
    output_config: Any = None
