"""Gateway → worker: the requests a worker serves and the messages that steer it
(cancel, shutdown, assign a spare, limits). See :mod:`.messages` for the reply
sequence."""

from __future__ import annotations

from typing import Any

import msgspec

from mlx_gateway.protocol.parts import INTERACTIVE, Constraint, Message, Priority, SamplingParams
from mlx_gateway.protocol.spec import WorkerSpec

IMAGE_PART = "image"
"""The ``type`` of an image part in a :class:`Generate` message's content."""
VIDEO_PART = "video"
"""The ``type`` of a video part in a :class:`Generate` message's content:
``{"type": "video", "payload": k}``, the video file being payload frame ``k``."""


class Generate(Message, tag="generate"):
    """Text generation: either chat ``messages`` (the worker applies the chat
    template) or a raw ``prompt`` (completions).

    Images (vision models): a message's image part reads ``{"type": "image",
    "detail": "auto"|"low"|"high"}`` and ``images[k]`` is the index of the payload
    frame holding the file of the ``k``-th image part, in message order. An audio
    part (``input_audio``, omni models) reads ``{"type": "audio", "format": …,
    "payload": f}``: ``f`` is the index of the payload frame holding its file. A
    video part reads ``{"type": "video", "payload": f}`` the same way."""

    request_id: str
    messages: list[dict[str, Any]] | None = None
    prompt: str | list[int] | None = None
    sampling: SamplingParams = msgspec.field(default_factory=SamplingParams)
    chat_template_kwargs: dict[str, Any] = {}
    images: list[int] = []
    logprobs: int | None = None
    """Report each generated token's log-probability with this many most likely
    alternatives (0 to 20) in :attr:`Chunk.logprobs`; ``None``: no log-probabilities."""
    constraint: Constraint | None = None
    """Constrained decoding: the output must match this grammar."""
    parse_tools: bool = False
    """Parse tool calls with the tokenizer's own parser (mlx-lm's, for the format
    its chat template shows): their text is withheld and each call arrives in
    :attr:`Chunk.tool_calls` instead."""
    thinking_budget: int | None = None
    """Most tokens the model may generate inside one thinking block: at the limit the
    worker forces the end-of-thinking marker and the model goes on with its answer
    (``None``: no limit; ``0``: close a block as soon as it opens)."""
    adapters: list[str] = []
    """LoRA adapters (ids mounted with :class:`MountAdapter` or at load) applied to
    this request, their deltas added; empty: the base model."""
    priority: Priority = INTERACTIVE
    """``batch``: it waits behind queued interactive requests, and its prefill yields
    to an interactive request's at its next slice."""


class Embed(Message, tag="embed"):
    """Embed ``texts`` or ``token_ids`` lists (one of them), and images; answered by
    :class:`Embeddings` then :class:`Done`.

    Images (image-embedding models): ``images[k]`` is the input position of the
    ``k``-th image, whose file is payload frame ``k``; the texts fill the other
    positions in order, so the inputs are ``len(texts) + len(images)`` rows."""

    request_id: str
    texts: list[str] = []
    token_ids: list[list[int]] = []
    dimensions: int | None = None
    truncate: bool = False
    images: list[int] = []
    priority: Priority = INTERACTIVE
    """``batch``: its inputs wait behind those of interactive requests."""


class Transcribe(Message, tag="transcribe"):
    """Speech to text. Payload 0 is the uploaded audio file, in any container.
    ``task`` is ``transcribe`` or ``translate`` (to English). :class:`Started` comes
    once the file is decoded (a file that is not audio gets ``Error(400)`` instead);
    then each 30 s window's text as a :class:`Chunk`, the result as
    :class:`Transcript`, and :class:`Done`."""

    request_id: str
    task: str = "transcribe"
    filename: str = ""
    language: str | None = None
    prompt: str | None = None
    temperature: float = 0.0
    word_timestamps: bool = False


class GenerateImage(Message, tag="generate_image"):
    """Text to image, or an edit: then payloads ``0 … images-1`` are the input image
    files and, with ``mask``, the last payload is the mask (transparent = edit here).
    ``None`` fields take the model's defaults. Answered by :class:`ImageStep` progress,
    :class:`Image` per picture (``n`` of them, seeds ``seed``, ``seed+1``, …), then
    :class:`Done`."""

    request_id: str
    prompt: str
    n: int = 1
    width: int | None = None
    height: int | None = None
    seed: int | None = None
    steps: int | None = None
    guidance: float | None = None
    negative_prompt: str | None = None
    images: int = 0
    mask: bool = False
    output_format: str = "png"
    """``png``, ``jpeg`` or ``webp``."""
    output_compression: int | None = None
    partial_images: int = 0
    """How many intermediate previews to send per picture (0 to 3)."""


class Synthesize(Message, tag="synthesize"):
    """Text to speech. ``voice`` is the name the client sent (the worker resolves it
    among the model's voices and the entry's aliases; ``None``: the default voice);
    ``response_format`` is ``mp3``, ``opus``, ``aac``, ``flac``, ``wav``, ``pcm``, or the
    Realtime API's ``g711_ulaw`` / ``g711_alaw`` (raw 8 kHz).
    :class:`Started` comes once the request passed its checks (an unknown voice gets
    ``Error(400)`` instead); then one :class:`SpeechChunk` per synthesized piece of
    the text, a last one with the file's final bytes, and :class:`Done`."""

    request_id: str
    input: str
    voice: str | None = None
    instructions: str | None = None
    speed: float = 1.0
    response_format: str = "mp3"
    language: str | None = None


class CountTokens(Message, tag="count_tokens"):
    """Count the prompt tokens of ``messages`` (chat template applied, as for a
    :class:`Generate`) or of ``prompt``; answered by one :class:`Done` whose
    ``usage.prompt_tokens`` is the count (``finish_reason`` ``counted``), or an Error.
    ``images`` as in :class:`Generate` (vision models: image parts count the tokens
    their pictures become; the vision tower does not run)."""

    request_id: str
    messages: list[dict[str, Any]] | None = None
    prompt: str | None = None
    chat_template_kwargs: dict[str, Any] = {}
    images: list[int] = []


class Rerank(Message, tag="rerank"):
    """Score each of ``documents`` for its relevance to ``query``; answered by
    :class:`Scores` then :class:`Done` (``usage.prompt_tokens``: the tokens read).

    A query and document pair longer than the model's window is cut to it
    (``max_tokens_per_doc`` cuts each document shorter still); with
    ``max_chunks_per_doc`` above 1 a long document is read in up to that many
    windows instead and scored by its best one. ``instruction`` is the task an LM
    reranker is told (``None``: its default)."""

    request_id: str
    query: str
    documents: list[str]
    max_tokens_per_doc: int | None = None
    max_chunks_per_doc: int = 1
    instruction: str | None = None


class Tokenize(Message, tag="tokenize"):
    """The token ids of ``text`` (with the tokenizer's special tokens when
    ``add_special``), or of ``messages`` with the chat template applied; with
    ``with_pieces`` also each token's text. Answered by :class:`Tokens` and
    :class:`Done`."""

    request_id: str
    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    chat_template_kwargs: dict[str, Any] = {}
    add_special: bool = False
    with_pieces: bool = False


class Detokenize(Message, tag="detokenize"):
    """The text of ``tokens``; answered by :class:`Tokens` (``text``) and :class:`Done`."""

    request_id: str
    tokens: list[int]


class MountAdapter(Message, tag="mount_adapter"):
    """Language models: load the LoRA adapter in the folder ``path`` (mlx-lm's
    ``adapter_config.json`` and ``adapters.safetensors``) as ``adapter_id``, beside the
    base weights (replacing one mounted under that id). Answered by a :class:`Done`
    (``finish_reason`` ``mounted``) or an :class:`Error` (400: the folder does not
    fit the model)."""

    request_id: str
    adapter_id: str
    path: str


class UnmountAdapter(Message, tag="unmount_adapter"):
    """Drop a mounted adapter and its prompt-cache entries. Answered by a :class:`Done`
    (``finish_reason`` ``unmounted``) or an :class:`Error` (404: not mounted; 409:
    requests running or waiting use it)."""

    request_id: str
    adapter_id: str


class Cancel(Message, tag="cancel"):
    """The client went away: stop work for ``request_id`` at the next step.
    The worker still ends the request with a :class:`Done` (finish ``cancelled``)."""

    request_id: str


class Shutdown(Message, tag="shutdown"):
    """Finish or drop in-flight work within ``grace`` seconds, then exit 0."""

    grace: float = 5.0


class Assign(Message, tag="assign"):
    """To a spare worker (started with ``WorkerSpec.spare``: backend imported, no
    model): load this model and serve it. The spare keeps its worker id (its ZeroMQ
    identity); ``spec.worker_id`` is ignored. From here on it is an ordinary worker:
    ``Progress``, then ``Ready`` (or a load ``Error`` and exit 3)."""

    spec: WorkerSpec


class Ping(Message, tag="ping"):
    """Ask for an immediate :class:`Heartbeat`."""


class Pause(Message, tag="pause"):
    """Interactive work is running on this machine (``hold``) or no longer is. While
    held, a worker whose queued and running requests are all ``batch`` spends at most
    ``duty`` of the wall time on steps (it waits between two steps; 0: it takes no
    step); one with an interactive request goes on. The gateway holds with ``duty``
    0 until every interactive request has its first token, then lets batch work run
    at its duty cycle until the last one ends."""

    hold: bool = False
    duty: float = 0.0


class Limits(Message, tag="limits"):
    """What the memory budget leaves this model's requests now: ``kv_free`` bytes of
    KV cache (the budget minus the other resident models' needs and this model's
    own weights and runtime). Sent when that changes; a language-model worker
    keeps a queued request waiting while the running ones' reservations and its
    own would exceed it (one request always runs)."""

    kv_free: int = 0
