"""Request bodies of Ollama's native API as msgspec Structs.

Decoding is the type check, as on the other surfaces: a wrong shape is a 400 whose
message names the field. Unknown fields are accepted and ignored (Ollama's clients
add fields faster than servers learn them); ``options`` is a free mapping whose
known keys are checked in :mod:`.options`.
"""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta, Struct

KeepAlive = float | str | None
"""Ollama's ``keep_alive``: seconds, or a duration such as ``"5m"``, ``"-1"``."""
Format = str | dict[str, Any] | None
"""``"json"``, ``""`` or a JSON schema."""
Think = bool | str | None
"""``true``/``false``, or an effort (``"low"``, ``"medium"``, ``"high"``)."""


class CallFunction(Struct):
    name: str
    arguments: dict[str, Any] | str = {}
    index: int | None = None


class OllamaToolCall(Struct):
    function: CallFunction
    id: str | None = None


class OllamaMessage(Struct, kw_only=True):
    role: str
    content: str | None = None
    images: list[str] | None = None
    """Base64 image files (vision models)."""
    tool_calls: list[OllamaToolCall] | None = None
    thinking: str | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None


class ToolFunction(Struct):
    name: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.\-]{1,64}$")]
    description: str | None = None
    parameters: dict[str, Any] | None = None


class OllamaTool(Struct):
    function: ToolFunction
    type: str = "function"


class ChatRequest(Struct, kw_only=True):
    """``POST /api/chat``."""

    model: str
    messages: list[OllamaMessage] = []
    tools: list[OllamaTool] | None = None
    format: Format = None
    options: dict[str, Any] | None = None
    stream: bool = True
    keep_alive: KeepAlive = None
    think: Think = None
    logprobs: bool | None = None


class GenerateRequest(Struct, kw_only=True):
    """``POST /api/generate``."""

    model: str
    prompt: str | None = None
    suffix: str | None = None
    system: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool = False
    images: list[str] | None = None
    format: Format = None
    options: dict[str, Any] | None = None
    stream: bool = True
    keep_alive: KeepAlive = None
    think: Think = None


class EmbedRequest(Struct, kw_only=True):
    """``POST /api/embed``."""

    model: str
    input: str | list[str] = []
    images: list[str] = []
    """Images (bare base64, as Ollama's other routes take them, or data: / http(s)
    URLs) for an image-embedding model: their vectors follow the inputs'."""
    truncate: bool = True
    options: dict[str, Any] | None = None
    keep_alive: KeepAlive = None
    dimensions: Annotated[int, Meta(ge=1)] | None = None


class EmbeddingsRequest(Struct, kw_only=True):
    """``POST /api/embeddings`` (Ollama's older embedding route)."""

    model: str
    prompt: str = ""
    options: dict[str, Any] | None = None
    keep_alive: KeepAlive = None


class ModelRequest(Struct, kw_only=True):
    """``/api/show``, ``/api/delete``, ``/api/pull``: a model by ``model`` (or the
    older ``name``)."""

    model: str | None = None
    name: str | None = None
    verbose: bool = False
    stream: bool = True
    insecure: bool = False

    @property
    def target(self) -> str:
        return self.model or self.name or ""


class CopyRequest(Struct, kw_only=True):
    """``POST /api/copy``."""

    source: str
    destination: str
