"""The whole wire vocabulary between the gateway and its workers.

Every message is a msgspec Struct tagged by ``op``. Requests flow gateway → worker,
replies flow worker → gateway. Large binary data (audio, images, embedding
matrices) never travels inside a message: it follows the header as separate frames
(see :mod:`mlx_gateway.protocol.frames`), and a message refers to it by index.

Per request the worker answers with one :class:`Started` (or an :class:`Error`
that rejects the request), zero or more :class:`Prefilled` (progress of a long
prompt), zero or more :class:`Chunk` (possibly coalesced into one
:class:`Batch` per generation step) and then exactly one :class:`Done` or
:class:`Error` carrying the same ``request_id``.

The vocabulary lives in three modules, re-exported here: :mod:`.parts` (the base
and the shared parts), :mod:`.requests` (gateway → worker) and :mod:`.replies`
(worker → gateway).
"""

from __future__ import annotations

from mlx_gateway.protocol.parts import (
    BATCH,
    INTERACTIVE,
    Constraint,
    Memory,
    Message,
    ModelFacts,
    Priority,
    SamplingParams,
    TokenLogprob,
    Usage,
)
from mlx_gateway.protocol.replies import (
    Batch,
    Chunk,
    ContextOverflow,
    Done,
    Embeddings,
    Error,
    Heartbeat,
    Image,
    ImageStep,
    Prefilled,
    Progress,
    Ready,
    Scores,
    SpeechChunk,
    Started,
    StepProgress,
    Tokens,
    Transcript,
)
from mlx_gateway.protocol.requests import (
    IMAGE_PART,
    VIDEO_PART,
    Assign,
    Cancel,
    CountTokens,
    Detokenize,
    Embed,
    Generate,
    GenerateImage,
    Limits,
    MountAdapter,
    Pause,
    Ping,
    Rerank,
    Shutdown,
    Synthesize,
    Tokenize,
    Transcribe,
    UnmountAdapter,
)

__all__ = [
    "BATCH",
    "IMAGE_PART",
    "INTERACTIVE",
    "VIDEO_PART",
    "Assign",
    "Batch",
    "Cancel",
    "Chunk",
    "Constraint",
    "ContextOverflow",
    "CountTokens",
    "Detokenize",
    "Done",
    "Embed",
    "Embeddings",
    "Error",
    "Generate",
    "GenerateImage",
    "Heartbeat",
    "Image",
    "ImageStep",
    "Limits",
    "Memory",
    "Message",
    "ModelFacts",
    "MountAdapter",
    "Pause",
    "Ping",
    "Prefilled",
    "Priority",
    "Progress",
    "Ready",
    "Reply",
    "Request",
    "Rerank",
    "SamplingParams",
    "Scores",
    "Shutdown",
    "SpeechChunk",
    "Started",
    "StepProgress",
    "Synthesize",
    "TokenLogprob",
    "Tokenize",
    "Tokens",
    "Transcribe",
    "Transcript",
    "UnmountAdapter",
    "Usage",
]

Request = (
    Generate
    | Embed
    | Transcribe
    | GenerateImage
    | Synthesize
    | CountTokens
    | Rerank
    | Tokenize
    | Detokenize
    | MountAdapter
    | UnmountAdapter
    | Cancel
    | Shutdown
    | Ping
    | Limits
    | Pause
    | Assign
)
Reply = (
    Ready
    | Progress
    | Heartbeat
    | Started
    | Prefilled
    | Chunk
    | Batch
    | Embeddings
    | Scores
    | Tokens
    | Transcript
    | SpeechChunk
    | ImageStep
    | Image
    | Done
    | Error
)
