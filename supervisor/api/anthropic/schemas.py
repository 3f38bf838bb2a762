"""Request bodies of the Anthropic Messages API as msgspec Structs.

Decoding is the whole of type validation, as for the OpenAI endpoints: a wrong
shape is a 400 naming the field (rendered in Anthropic's error shape by the
handler). Unknown fields (``cache_control``, ``container``,
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


class PlainTextSource(Struct, tag="text", tag_field="type"):
    """A document sent as text (``media_type`` ``text/plain``)."""

    data: str
    media_type: str = "text/plain"


class ContentSource(Struct, tag="content", tag_field="type"):
    """A document made of content blocks (text and images)."""

    content: str | list[TextBlock | ImageBlock]


class DocumentBlock(Struct, tag="document", tag_field="type"):
    """A document: a PDF or plain text (``base64``), text, content blocks, or a URL
    the gateway fetches. ``citations`` is accepted; answers carry no citations."""

    source: Base64Source | PlainTextSource | ContentSource | URLSource
    title: str | None = None
    context: str | None = None
    citations: Any = None


class ToolUseBlock(Struct, tag="tool_use", tag_field="type"):
    id: str
    name: str
    input: dict[str, Any]


class ToolReferenceBlock(Struct, tag="tool_reference", tag_field="type"):
    """A deferred tool named in a tool result: it is loaded from the first round."""

    tool_name: str


class ToolResultBlock(Struct, tag="tool_result", tag_field="type"):
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock | DocumentBlock | ToolReferenceBlock] = ""
    is_error: bool = False


class ThinkingBlock(Struct, tag="thinking", tag_field="type"):
    thinking: str
    signature: str = ""


class RedactedThinkingBlock(Struct, tag="redacted_thinking", tag_field="type"):
    data: str


class ServerToolUseBlock(Struct, tag="server_tool_use", tag_field="type"):
    """A call of a server tool (web search or fetch) that ran in an earlier turn."""

    id: str
    name: str
    input: dict[str, Any] = {}


class McpToolUseBlock(Struct, tag="mcp_tool_use", tag_field="type"):
    id: str
    name: str
    server_name: str = ""
    input: dict[str, Any] = {}


class WebSearchResultBlock(Struct, tag="web_search_tool_result", tag_field="type"):
    tool_use_id: str
    content: Any = None


class WebFetchResultBlock(Struct, tag="web_fetch_tool_result", tag_field="type"):
    tool_use_id: str
    content: Any = None


class ToolSearchResultBlock(Struct, tag="tool_search_tool_result", tag_field="type"):
    """A tool search of an earlier turn: ``content.tool_references`` stay loaded."""

    tool_use_id: str
    content: Any = None


class McpToolResultBlock(Struct, tag="mcp_tool_result", tag_field="type"):
    tool_use_id: str
    content: str | list[TextBlock] = ""
    is_error: bool = False


Block = (
    TextBlock
    | ImageBlock
    | DocumentBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ServerToolUseBlock
    | McpToolUseBlock
    | WebSearchResultBlock
    | WebFetchResultBlock
    | McpToolResultBlock
    | ToolSearchResultBlock
)


class AnthropicMessage(Struct):
    role: Literal["user", "assistant", "system"]
    content: str | list[Block]


class AnthropicTool(Struct):
    """A client tool (``input_schema``; ``defer_loading``: found by a tool search
    rather than rendered), or a server tool named by its ``type``
    (``web_search_20250305``, ``web_fetch_20250910``, ``tool_search_tool_regex_20251119``
    …), which has no schema."""

    name: FunctionName
    input_schema: dict[str, Any] | None = None
    description: str | None = None
    type: str | None = None
    max_uses: Annotated[int, Meta(ge=1)] | None = None
    allowed_domains: list[str] | None = None
    blocked_domains: list[str] | None = None
    defer_loading: bool = False


class McpToolConfiguration(Struct):
    enabled: bool = True
    allowed_tools: list[str] | None = None


class McpServerDefinition(Struct):
    """An entry of ``mcp_servers`` (the ``mcp-client-2025-04-04`` beta)."""

    url: str
    name: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")]
    type: Literal["url"] = "url"
    authorization_token: str | None = None
    tool_configuration: McpToolConfiguration | None = None


class ToolChoice(Struct):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool = False


class ThinkingConfig(Struct):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: ThinkingBudget | None = None


class DiagnosticsRequest(Struct):
    """``diagnostics`` (beta ``cache-diagnosis-2026-04-07``): compare the prompt cache
    use with the request that produced ``previous_message_id``."""

    previous_message_id: str | None = None


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
    mcp_servers: list[McpServerDefinition] | None = None
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
    diagnostics: DiagnosticsRequest | None = None
    context_management: Any = None
    output_config: Any = None


class CountTokensRequest(Struct, kw_only=True):
    """``POST /v1/messages/count_tokens``."""

    model: str
    messages: Annotated[list[AnthropicMessage], Meta(min_length=1)]
    system: str | list[TextBlock] | None = None
    tools: list[AnthropicTool] | None = None
    tool_choice: ToolChoice | None = None
    mcp_servers: list[McpServerDefinition] | None = None
    thinking: ThinkingConfig | None = None
    context_management: Any = None
    output_config: Any = None
