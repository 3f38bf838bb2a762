"""The gateway's MCP tools: their names and arguments (the contract), what each
says of itself to an agent, and the models each runs on."""

from __future__ import annotations

from mlx_gateway.supervisor.config.kinds.image import is_edit_model
from mlx_gateway.supervisor.engine.kinds import (
    CHAT_KINDS,
    EMBEDDING_KINDS,
    IMAGE_KINDS,
    RERANK_KINDS,
    SPEECH_KINDS,
    TRANSCRIPTION_KINDS,
    kind_of,
)
from mlx_gateway.supervisor.mcp_server import manage, media, text
from mlx_gateway.supervisor.mcp_server.args import (
    AskArgs,
    EditArgs,
    EmbedArgs,
    ImageArgs,
    ModelArgs,
    NoArgs,
    RerankArgs,
    SpeakArgs,
    TranscribeArgs,
    UnloadArgs,
)
from mlx_gateway.supervisor.mcp_server.catalog import ToolDef
from mlx_gateway.supervisor.pool.model_handle import ModelHandle


def _generates(handle: ModelHandle) -> bool:
    return kind_of(handle) in IMAGE_KINDS and not is_edit_model(handle.config)


def _edits(handle: ModelHandle) -> bool:
    return kind_of(handle) in IMAGE_KINDS and is_edit_model(handle.config)


def _reranker(handle: ModelHandle) -> bool:
    return kind_of(handle) in RERANK_KINDS


def _ranks(handle: ModelHandle) -> bool:
    return kind_of(handle) in RERANK_KINDS + EMBEDDING_KINDS


def _embeds(handle: ModelHandle) -> bool:
    return kind_of(handle) in EMBEDDING_KINDS


def _hears(handle: ModelHandle) -> bool:
    return kind_of(handle) in TRANSCRIPTION_KINDS


def _speaks(handle: ModelHandle) -> bool:
    return kind_of(handle) in SPEECH_KINDS


def _talks(handle: ModelHandle) -> bool:
    return kind_of(handle) in CHAT_KINDS


TOOLS: tuple[ToolDef, ...] = (
    ToolDef(
        "generate_image",
        "Draw a picture from a text prompt with a local image model; answers the image.",
        ImageArgs,
        media.generate_image,
        serves=_generates,
    ),
    ToolDef(
        "edit_image",
        "Edit a picture as a text prompt says with a local image-edit model; answers the "
        "edited image.",
        EditArgs,
        media.edit_image,
        serves=_edits,
    ),
    ToolDef(
        "transcribe",
        "Transcribe speech (an audio file, base64 or by URL) to text with a local Whisper model.",
        TranscribeArgs,
        media.transcribe,
        serves=_hears,
    ),
    ToolDef(
        "speak",
        "Say a text aloud with a local text-to-speech model; answers the audio (WAV).",
        SpeakArgs,
        media.speak,
        serves=_speaks,
    ),
    ToolDef(
        "embed",
        "Embedding vectors of texts from a local embeddings model, as JSON (one list of "
        "numbers per text).",
        EmbedArgs,
        text.embed,
        serves=_embeds,
    ),
    ToolDef(
        "rerank",
        "Rank documents by relevance to a query with a local reranker; answers JSON, best "
        "first: index, relevance_score, document.",
        RerankArgs,
        text.rerank,
        serves=_ranks,
        preferred=_reranker,
    ),
    ToolDef(
        "ask",
        "Ask a local language (or vision) model; answers its reply. For work to offload: "
        "summaries, drafts, classification, private data that should stay on this machine.",
        AskArgs,
        text.ask,
        serves=_talks,
    ),
    ToolDef(
        "list_models",
        "The models this gateway serves to this key: name, model_type, state (loaded or "
        "not), aliases, context window; as JSON.",
        NoArgs,
        manage.list_models,
        works=False,
    ),
    ToolDef(
        "load_model",
        "Load a model now (admin); answers its state as JSON.",
        ModelArgs,
        manage.load_model,
        admin=True,
    ),
    ToolDef(
        "unload_model",
        "Unload a model (admin): refused while it is busy unless force; answers its state as JSON.",
        UnloadArgs,
        manage.unload_model,
        admin=True,
    ),
)
