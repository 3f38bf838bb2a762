"""``POST /v1/embeddings``: the request body and the response objects, as OpenAI
defines them, and the checks on ``input`` that its type cannot express."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import UNSET, Meta, Struct, UnsetType

from mlx_gateway.supervisor.engine.requests import ServiceTier
from mlx_gateway.supervisor.errors import BadRequest

MAX_INPUTS = 2048
"""Most inputs in one request, as OpenAI allows."""

# Bounded so that an oversized number is a 400 naming the field, not a wire error.
TokenId = Annotated[int, Meta(ge=0, le=2**31 - 1)]
Input = str | list[str | TokenId | list[TokenId] | dict[str, Any]]
"""Strings, token ids, or (image-embedding models) text and image parts: see
:mod:`.items`."""


class EmbeddingRequest(Struct, kw_only=True):
    """The request body. Unknown fields are accepted and ignored."""

    model: str
    input: Input | None = None
    """Required unless ``images`` holds the inputs."""
    images: list[str] | None = None
    """Extension (Cohere's): images (data: URLs, http(s) URLs or bare base64) embedded
    after the ``input`` items."""
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Meta(ge=1, le=2**31 - 1)] | None = None
    user: str | None = None
    keep_alive: float | str | None = None
    """Extension (Ollama's): how long the model stays loaded after this request."""
    ttl: float | None = None
    """Extension (LM Studio's): seconds the model stays loaded after this request."""
    service_tier: ServiceTier | None = None
    """Extension (as on chat completions): ``flex`` makes the request batch work."""


class Embedding(Struct, kw_only=True):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str
    """Floats, or base64 of the little-endian float32 bytes. A multi-vector model's:
    the mean of its token vectors, L2-normalized."""
    multi_vector: list[list[float]] | UnsetType = UNSET
    """Extension, multi-vector models (ColQwen): one vector per token, for late
    interaction."""


class EmbeddingUsage(Struct):
    prompt_tokens: int
    total_tokens: int


class EmbeddingList(Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


_SHAPES = (
    "'input' must be a string, a list of strings, a list of token ids, "
    "or a list of lists of token ids"
)


_NAMES: dict[type, str] = {str: "string", list: "list of token ids"}


def split_input(value: Input) -> tuple[list[str], list[list[int]]]:
    """``input`` as ``(texts, token id lists)``, exactly one of them non-empty.

    Raises :class:`BadRequest` naming ``input`` or ``input[i]`` for an empty input,
    mixed kinds of items, or more than :data:`MAX_INPUTS` inputs."""
    if isinstance(value, str):
        if not value:
            raise BadRequest("'input' must not be an empty string.", param="input")
        return [value], []
    if not value:
        raise BadRequest("'input' must not be an empty list.", param="input")
    ints = [isinstance(item, int) for item in value]
    if all(ints):
        return [], [value]  # type: ignore[list-item]  # one input given as token ids
    if any(ints):
        i = ints.index(True)
        raise BadRequest(
            f"{_SHAPES}; input[{i}] is a lone token id among other inputs.", param="input"
        )
    if len(value) > MAX_INPUTS:
        raise BadRequest(
            f"'input' holds {len(value)} inputs; at most {MAX_INPUTS} are allowed per request.",
            param="input",
        )
    kind = type(value[0])
    for i, item in enumerate(value):
        if type(item) is not kind:
            raise BadRequest(
                f"{_SHAPES}; input[{i}] is a {_NAMES[type(item)]} but input[0] is a "
                f"{_NAMES[kind]}.",
                param="input",
            )
        if not item:
            raise BadRequest(f"input[{i}] must not be empty.", param=f"input[{i}]")
    if kind is str:
        return value, []  # type: ignore[return-value]
    return [], value  # type: ignore[return-value]
