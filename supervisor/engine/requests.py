"""Request bodies of the OpenAI text-generation endpoints, as msgspec Structs.

Decoding a body into these types is the whole of type validation: a wrong type or
an out-of-range value fails with the field path (see :mod:`.body`). Unknown
top-level fields are accepted and ignored, as the OpenAI API grows faster than
any gateway; the types of known fields are always checked.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from mlx_gateway.supervisor.engine.tools import (
    FunctionTool,
    NamedToolChoice,
    ResponseFormat,
    ToolChoiceMode,
)
from mlx_gateway.supervisor.errors import BadRequest

# ---------------------------------------------------------------- value ranges

# Integers are bounded where the wire (msgpack: 64 bits) and the workers (int32
# token ids; MLX seeds are unsigned) end: beyond, a 400 names the field, not a 500.
INT32_MAX = 2**31 - 1
MaxTokens = Annotated[int, Meta(ge=1, le=INT32_MAX)]
Temperature = Annotated[float, Meta(ge=0.0, le=2.0)]
TopP = Annotated[float, Meta(gt=0.0, le=1.0)]
TopK = Annotated[int, Meta(ge=-1, le=INT32_MAX)]
"""``0`` and ``-1`` (vLLM's spelling) both mean "no top-k"."""
MinP = Annotated[float, Meta(ge=0.0, le=1.0)]
RepetitionPenalty = Annotated[float, Meta(gt=0.0)]
Penalty = Annotated[float, Meta(ge=-2.0, le=2.0)]
N = Annotated[int, Meta(ge=1, le=16)]
TopLogprobs = Annotated[int, Meta(ge=0, le=20)]
TokenId = Annotated[int, Meta(ge=0, le=INT32_MAX)]
Seed = Annotated[int, Meta(ge=0, le=2**63 - 1)]
ThinkingBudget = Annotated[int, Meta(ge=0, le=INT32_MAX)]

# ---------------------------------------------------------------- chat messages


class TextPart(Struct, tag="text", tag_field="type"):
    """A content part ``{"type": "text", "text": ...}``."""

    text: str


Content = str | list[TextPart]


class ImageURL(Struct):
    url: str
    """A ``data:`` URL (base64) or an http(s) URL the gateway fetches."""
    detail: Literal["auto", "low", "high"] = "auto"


class ImagePart(Struct, tag="image_url", tag_field="type"):
    """A content part ``{"type": "image_url", "image_url": {"url": ..., "detail": ...}}``
    (user messages only; models of model_type vlm)."""

    image_url: ImageURL


class InputAudio(Struct):
    data: str
    """The audio file, base64-encoded (no ``data:`` prefix)."""
    format: str = "wav"
    """OpenAI names ``wav`` and ``mp3``; any format FFmpeg reads is decoded."""


class InputAudioPart(Struct, tag="input_audio", tag_field="type"):
    """A content part ``{"type": "input_audio", "input_audio": {"data": ..., "format": ...}}``
    (user messages only; vlm models with an audio encoder)."""

    input_audio: InputAudio


class VideoURL(Struct):
    url: str
    """A ``data:`` URL (base64), an http(s) URL the gateway fetches, or a file path
    under the model's ``local_video_dirs``."""


VideoRef = str | VideoURL
"""A video's URL, as it is or as ``{"url": …}`` (peers send either)."""


class VideoURLPart(Struct, tag="video_url", tag_field="type"):
    """A content part ``{"type": "video_url", "video_url": {"url": ...}}`` (user
    messages only; models of model_type vlm)."""

    video_url: VideoRef


class InputVideoPart(Struct, tag="input_video", tag_field="type"):
    """``{"type": "input_video", "video_url": …}`` (or ``"video": …``), a peer's name."""

    video_url: VideoRef | None = None
    video: VideoRef | None = None


class VideoPart(Struct, tag="video", tag_field="type"):
    """``{"type": "video", "video": …}``, a peer's name (mlx-vlm's, vLLM's)."""

    video: VideoRef


class FileObject(Struct):
    filename: str | None = None
    file_data: str | None = None
    """The file: a ``data:`` URL (``data:application/pdf;base64,…``) or bare base64."""
    file_id: str | None = None
    """Refused: the gateway has no Files API."""


class FilePart(Struct, tag="file", tag_field="type"):
    """A content part ``{"type": "file", "file": {"filename", "file_data"}}``: a PDF or
    text document (read as text, or as page images for models of model_type vlm)."""

    file: FileObject


UserContent = (
    str
    | list[
        TextPart | ImagePart | InputAudioPart | VideoURLPart | InputVideoPart | VideoPart | FilePart
    ]
)
ToolContent = str | list[TextPart | ImagePart | FilePart]
"""A tool's result: text, and the images (a screenshot) and documents it returned."""


class FunctionCall(Struct):
    name: str
    arguments: str


class ToolCall(Struct):
    """A tool call made by the assistant in an earlier turn."""

    id: str
    function: FunctionCall
    type: Literal["function"] = "function"


class ChatMessage(Struct, tag_field="role"):
    """Base of the chat messages; tagged by ``role``. Unknown keys are dropped;
    optional keys the client left out stay out (:data:`UNSET`), and an explicit
    ``null`` stays ``None``, so the chat template sees what the client sent."""


class SystemMessage(ChatMessage, tag="system"):
    content: Content
    name: str | UnsetType | None = UNSET


class DeveloperMessage(ChatMessage, tag="developer"):
    content: Content
    name: str | UnsetType | None = UNSET


class UserMessage(ChatMessage, tag="user"):
    content: UserContent
    name: str | UnsetType | None = UNSET


class AssistantMessage(ChatMessage, tag="assistant"):
    content: Content | UnsetType | None = UNSET
    name: str | UnsetType | None = UNSET
    tool_calls: list[ToolCall] | UnsetType | None = UNSET
    reasoning_content: str | UnsetType | None = UNSET
    """An earlier turn's thinking (vLLM's field), for templates that render it."""


class ToolMessage(ChatMessage, tag="tool"):
    content: ToolContent
    tool_call_id: str


Message = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage


# ---------------------------------------------------------------- requests


class StreamOptions(Struct):
    include_usage: bool = False


ServiceTier = Literal["auto", "default", "flex", "scale", "priority"]
"""OpenAI's ``service_tier`` values."""


class SamplingFields(Struct, kw_only=True):
    """The fields chat and legacy completions share (``model`` and sampling)."""

    model: str
    max_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    seed: Seed | None = None
    repetition_penalty: RepetitionPenalty | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: N | None = None
    user: str | None = None
    prompt_cache_key: str | None = None
    """OpenAI's: a route keeps requests with the same key on one model (else ``user``)."""
    adapter: str | None = None
    """LoRA adapters of the model to run with: ``"id"``, ``"a+b"``, ``"none"``."""
    keep_alive: float | str | None = None
    """Extension (Ollama's): how long the model stays loaded after this request."""
    ttl: float | None = None
    """Extension (LM Studio's): seconds the model stays loaded after this request."""
    service_tier: ServiceTier | None = None
    """``flex``: the request is batch work (it yields to interactive requests);
    the others leave the priority of the caller's key."""


class ChatCompletionRequest(SamplingFields, kw_only=True):
    """``POST /v1/chat/completions``."""

    messages: Annotated[list[Message], Meta(min_length=1)]
    max_completion_tokens: MaxTokens | None = None
    metadata: dict[str, str] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    """vLLM's extension: extra variables for the model's chat template."""
    tools: list[FunctionTool] | None = None
    tool_choice: ToolChoiceMode | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    logprobs: bool | None = None
    top_logprobs: TopLogprobs | None = None
    reasoning_effort: str | None = None
    """``none``/``minimal`` turn a hybrid model's thinking off; other values turn it
    on (``low`` and ``medium`` with a thinking budget; see :mod:`.thinking`)."""
    enable_thinking: bool | None = None
    """mlx-vlm's field: the chat template's ``enable_thinking`` (wins over the effort)."""
    thinking_budget: ThinkingBudget | None = None
    """Most tokens inside a thinking block; then it is closed and the model answers."""


class CompletionRequest(SamplingFields, kw_only=True):
    """``POST /v1/completions``.

    ``prompt`` is a string, a list of token ids, or a one-element list of either;
    batches of several prompts are rejected by the handler."""

    prompt: str | list[str | TokenId | list[TokenId]]
    echo: bool = False


def messages_to_builtins(messages: list[Message]) -> list[dict[str, Any]]:
    """The parsed messages as plain dicts for :class:`~mlx_gateway.protocol.messages.Generate`
    (``role`` included, unset optional keys left out, content part lists kept)."""
    return msgspec.to_builtins(messages)


def check_common(req: SamplingFields) -> None:
    """Checks across fields, beyond what the schema types express."""
    if isinstance(req, ChatCompletionRequest):
        if req.top_logprobs is not None and not req.logprobs:
            raise BadRequest(
                "'top_logprobs' is only allowed when 'logprobs' is true.", param="top_logprobs"
            )
    elif req.n is not None and req.n != 1:
        raise BadRequest("Only n=1 is supported.", param="n")
    if req.stream_options is not None and not req.stream:
        raise BadRequest(
            "The 'stream_options' parameter is only allowed when 'stream' is true.",
            param="stream_options",
        )
