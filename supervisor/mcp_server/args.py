"""The arguments of each MCP tool, as msgspec structs: decoded and checked from a
call's ``arguments`` (a bad one is an error naming it), and written as the tool's
``inputSchema`` in ``tools/list``."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta, Struct

from mlx_gateway.supervisor.errors import BadRequest

SEED_LIMIT = 2**32

Model = Annotated[str, Meta(min_length=1)]


class Args(Struct, kw_only=True, forbid_unknown_fields=True):
    """What every tool but ``list_models`` takes: the model to run it on."""

    model: Model | None = None


class ImageArgs(Args, kw_only=True, forbid_unknown_fields=True):
    """``generate_image``."""

    prompt: Annotated[str, Meta(min_length=1, description="What the picture shows.")]
    size: (
        Annotated[
            str, Meta(description="WIDTHxHEIGHT, such as 1024x1024 (default: the model's size).")
        ]
        | None
    ) = None
    seed: (
        Annotated[int, Meta(ge=0, lt=SEED_LIMIT, description="The same seed, the same picture.")]
        | None
    ) = None


class EditArgs(ImageArgs, kw_only=True, forbid_unknown_fields=True):
    """``edit_image``."""

    image: Annotated[
        str, Meta(min_length=1, description="The picture to edit: base64, or a data: URL.")
    ]


class TranscribeArgs(Args, kw_only=True, forbid_unknown_fields=True):
    """``transcribe``: the audio as base64 or by URL (one of the two)."""

    audio: (
        Annotated[str, Meta(description="The audio file (any format FFmpeg reads), base64.")] | None
    ) = None
    url: Annotated[str, Meta(description="Or the audio file's http(s) or data: URL.")] | None = None
    language: (
        Annotated[
            str, Meta(description="The language spoken (ISO 639-1, such as en); default: detected.")
        ]
        | None
    ) = None


class SpeakArgs(Args, kw_only=True, forbid_unknown_fields=True):
    """``speak``."""

    text: Annotated[str, Meta(min_length=1, description="What to say.")]
    voice: (
        Annotated[
            str, Meta(min_length=1, description="One of the model's voices (default: its first).")
        ]
        | None
    ) = None


class EmbedArgs(Args, kw_only=True, forbid_unknown_fields=True):
    """``embed``."""

    texts: Annotated[
        list[Annotated[str, Meta(min_length=1)]],
        Meta(min_length=1, max_length=2048, description="The texts to embed, one vector each."),
    ]


class RerankArgs(Args, kw_only=True, forbid_unknown_fields=True):
    """``rerank``."""

    query: Annotated[str, Meta(min_length=1, description="What the documents are ranked against.")]
    documents: Annotated[
        list[str], Meta(min_length=1, max_length=10_000, description="The texts to rank.")
    ]
    top_n: (
        Annotated[int, Meta(ge=1, description="Return only the best N (default: all).")] | None
    ) = None


class AskArgs(Args, kw_only=True, forbid_unknown_fields=True):
    """``ask``."""

    prompt: Annotated[str, Meta(min_length=1, description="The question or the task.")]
    system: Annotated[str, Meta(description="A system prompt.")] | None = None
    max_tokens: (
        Annotated[int, Meta(ge=1, le=2**31 - 1, description="The most tokens to answer with.")]
        | None
    ) = None


class ModelArgs(Struct, kw_only=True, forbid_unknown_fields=True):
    """``load_model``."""

    model: Annotated[Model, Meta(description="The model's served name.")]


class UnloadArgs(ModelArgs, kw_only=True, forbid_unknown_fields=True):
    """``unload_model``."""

    force: Annotated[bool, Meta(description="Stop it even while busy (its requests fail).")] = False


class NoArgs(Struct, kw_only=True, forbid_unknown_fields=True):
    """``list_models``."""


def decode(arguments: dict[str, Any] | None, kind: type[Struct]) -> Any:
    """A call's ``arguments`` as ``kind``; a 400 naming the bad argument otherwise."""
    try:
        return msgspec.convert(arguments or {}, kind)
    except msgspec.ValidationError as exc:
        text = str(exc).replace("`$.", "`")
        text = text.replace("Object contains", "The arguments contain")
        text = text.replace("Object missing", "The arguments lack the")
        raise BadRequest(f"Invalid arguments: {text}.", code="invalid_arguments") from None


def input_schema(kind: type[Struct], models: list[str]) -> dict[str, Any]:
    """``kind``'s JSON schema as a tool's ``inputSchema``: its ``model`` described with
    the models it may name (required unless there is only one)."""
    _, components = msgspec.json.schema_components((kind,), ref_template="#/$defs/{name}")
    schema = dict(components[kind.__name__])
    schema.pop("title", None)
    schema.pop("description", None)
    properties = {name: _plain(field) for name, field in schema.get("properties", {}).items()}
    if "model" in properties:
        names = ", ".join(models)
        if len(models) == 1 and "model" not in schema.get("required", []):
            said = f"The model (default: {models[0]}, the only one)."
        else:
            said = f"The model: one of {names}."
            schema["required"] = sorted({*schema.get("required", []), "model"})
        properties["model"] = {"type": "string", "description": said}
    schema["properties"] = properties
    return schema


def _plain(field: dict[str, Any]) -> dict[str, Any]:
    """An optional argument's schema as its type's (``anyOf [T, null]`` → ``T``):
    leaving it out is how a call says "none"."""
    options = field.get("anyOf")
    if not isinstance(options, list) or len(options) != 2 or {"type": "null"} not in options:
        return field
    (plain,) = [option for option in options if option != {"type": "null"}]
    return dict(plain)
