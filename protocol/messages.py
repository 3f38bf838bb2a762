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
"""

from __future__ import annotations

from typing import Any

import msgspec

from mlx_gateway.protocol.spec import WorkerSpec


class Message(msgspec.Struct, tag_field="op", omit_defaults=True, forbid_unknown_fields=False):
    """Base of every wire message."""


# ---------------------------------------------------------------- shared parts


class SamplingParams(msgspec.Struct, omit_defaults=True):
    """Sampling settings after the gateway applied the model's defaults."""

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    stop: list[str] = []
    fit_max_tokens: bool = False
    """A ``max_tokens`` beyond what the context leaves after the prompt is cut to
    that (the model's ``max_tokens_overflow: clamp``) instead of the 400."""


class Usage(msgspec.Struct, omit_defaults=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    draft_proposed: int = 0
    """Tokens a draft model proposed (speculative decoding; 0 without one)."""
    draft_accepted: int = 0
    """Proposed tokens the model took (each is one of ``completion_tokens``)."""


class Memory(msgspec.Struct, omit_defaults=True):
    """A worker's memory as it measured it, in bytes."""

    rss: int = 0
    mlx_active: int = 0
    mlx_cache: int = 0
    mlx_peak: int = 0
    kv_active: int = 0
    """Bytes of KV cache held by the requests running now (language models)."""
    kv_kept: int = 0
    """Bytes of KV cache kept for later turns (the prompt cache)."""
    kv_limit: int = 0
    """Bytes of KV cache the worker admits requests against now (0: no limit)."""


class ModelFacts(msgspec.Struct, omit_defaults=True):
    """What a loaded model tells about itself."""

    context_length: int | None = None
    model_type: str | None = None
    load_seconds: float = 0.0
    extra: dict[str, str] = {}


class Constraint(msgspec.Struct, omit_defaults=True):
    """A grammar the generated text must match, in llguidance's Lark dialect
    (``%json {…}`` embeds a JSON schema). ``param`` names the request field it came
    from, for the 400 when it does not compile."""

    grammar: str
    param: str = "response_format"


class TokenLogprob(msgspec.Struct, array_like=True):
    """One generated token: its text (the text of the tokens of a chunk joins to the
    chunk's text), its log-probability and the most likely alternatives as
    ``(text, logprob)`` pairs."""

    text: str
    logprob: float
    top: list[tuple[str, float]] = []


# ---------------------------------------------------------------- gateway → worker


IMAGE_PART = "image"
"""The ``type`` of an image part in a :class:`Generate` message's content."""


class Generate(Message, tag="generate"):
    """Text generation: either chat ``messages`` (the worker applies the chat
    template) or a raw ``prompt`` (completions).

    Images (vision models): a message's image part reads ``{"type": "image",
    "detail": "auto"|"low"|"high"}`` and ``images[k]`` is the index of the payload
    frame holding the file of the ``k``-th image part, in message order. An audio
    part (``input_audio``, omni models) reads ``{"type": "audio", "format": …,
    "payload": f}``: ``f`` is the index of the payload frame holding its file."""

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


class Embed(Message, tag="embed"):
    """Embed ``texts`` or ``token_ids`` lists (one of them); answered by
    :class:`Embeddings` then :class:`Done`."""

    request_id: str
    texts: list[str] = []
    token_ids: list[list[int]] = []
    dimensions: int | None = None
    truncate: bool = False


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


class Limits(Message, tag="limits"):
    """What the memory budget leaves this model's requests now: ``kv_free`` bytes of
    KV cache (the budget minus the other resident models' needs and this model's
    own weights and runtime). Sent when that changes; a language-model worker
    keeps a queued request waiting while the running ones' reservations and its
    own would exceed it (one request always runs)."""

    kv_free: int = 0


# ---------------------------------------------------------------- worker → gateway


class Ready(Message, tag="ready"):
    """The model is loaded and the worker accepts requests."""

    pid: int
    facts: ModelFacts = msgspec.field(default_factory=ModelFacts)
    memory: Memory = msgspec.field(default_factory=Memory)


class Progress(Message, tag="progress"):
    """Loading progress: ``stage`` is e.g. ``download`` or ``load``."""

    stage: str
    fraction: float | None = None
    detail: str = ""


class StepProgress(msgspec.Struct, omit_defaults=True):
    """What the worker's MLX thread is doing, as its main thread sees it: the
    steps it finished (a step: one ``Backend.step``, a request's checks, the load),
    what the step running now is, and for how long it has shown no progress (since
    it began or since its last reply, whichever is later). The gateway kills a
    worker whose step shows no progress past its ``step_timeout``."""

    steps: int = 0
    """Steps finished since the worker started."""
    current: str = ""
    """The step running now (``decode of 2 requests``, ``prefill of 4096 tokens``,
    ``checks of a chat request``, ``load``); empty between steps."""
    stalled_for: float = 0.0
    """Seconds since the current step began or last sent a reply (0 between steps)."""
    longest: float = 0.0
    """The longest time a finished step went without progress, seconds."""


class Heartbeat(Message, tag="heartbeat"):
    inflight: int = 0
    queued: int = 0
    memory: Memory = msgspec.field(default_factory=Memory)
    step: StepProgress = msgspec.field(default_factory=StepProgress)
    prefill_tps: float = 0.0
    """Measured prompt tokens per second of a long prefill (language models, once
    they read a prompt; 0.0: not measured)."""
    finished: int = 0
    """Requests that ran and ended with ``Done`` since the worker started (a
    request refused with an ``Error`` does not count): the gateway learns the
    model's memory need only from heartbeats after requests that ran."""


class Started(Message, tag="started"):
    """The request passed the worker's checks (prompt tokenized, fits the context)
    and generation begins. Sent before any :class:`Chunk`, so the gateway can
    answer a rejected request with a plain HTTP error instead of a broken stream."""

    request_id: str
    prompt_tokens: int = 0
    cached_tokens: int = 0
    reasoning: bool = False
    """The prompt ends inside an open thinking block (the chat template opened it):
    the output starts with reasoning."""


class Prefilled(Message, tag="prefilled"):
    """Prefill progress of a long prompt: ``done`` of its ``total`` tokens are in the
    KV cache (prompt-cache hits included). Sent after each prefill slice that leaves
    more to do, between :class:`Started` and the first :class:`Chunk`; a prompt read
    in one slice gets none. The gateway shows it in its stream keep-alives."""

    request_id: str
    done: int
    total: int


class Chunk(Message, tag="chunk"):
    """New output for one request. ``text`` is detokenized and never contains a
    (partial) stop sequence."""

    request_id: str
    text: str = ""
    tokens: int = 0
    logprobs: list[TokenLogprob] = []
    """With ``Generate.logprobs``: the tokens whose text this chunk completes."""
    tool_calls: list[tuple[str, str]] = []
    """With ``Generate.parse_tools``: calls completed by this chunk, as ``(name,
    arguments as JSON text)``."""


class Batch(Message, tag="batch"):
    """New output of every active request with any, in one message: one generation
    step's, or several steps' when they come faster than the model's
    ``stream_interval`` (a request then has one chunk holding all of them)."""

    chunks: list[Chunk] = []


class Embeddings(Message, tag="embeddings"):
    """The vectors of an :class:`Embed`: payload 0 is a C-order little-endian
    float32 matrix of ``rows`` by ``dims``."""

    request_id: str
    rows: int
    dims: int
    prompt_tokens: int = 0


class Scores(Message, tag="scores"):
    """The relevance of each document of a :class:`Rerank`, in document order."""

    request_id: str
    scores: list[float]


class Tokens(Message, tag="tokens"):
    """The answer to a :class:`Tokenize` (``tokens``; with ``with_pieces``, ``pieces``:
    each token's text as it adds to the decoded text) or a :class:`Detokenize`
    (``text``)."""

    request_id: str
    tokens: list[int] = []
    pieces: list[str] = []
    text: str = ""


class Transcript(Message, tag="transcript"):
    """The whole result of a :class:`Transcribe`. ``language`` is the language's
    English name (``english``, as the OpenAI API reports it); ``segments`` follow
    mlx-whisper's shape (id, start, end, text, tokens, …, and ``words`` when asked)."""

    request_id: str
    text: str
    language: str | None = None
    duration: float = 0.0
    segments: list[dict[str, Any]] = []


class SpeechChunk(Message, tag="speech_chunk"):
    """The next bytes of a :class:`Synthesize`'s audio file: payload 0 (possibly
    empty: encoders work in frames). ``seconds`` of audio were synthesized for it;
    ``sample_rate`` is the file's. The concatenated payloads are the whole file."""

    request_id: str
    seconds: float = 0.0
    sample_rate: int = 0


class ImageStep(Message, tag="image_step"):
    """Progress of a :class:`GenerateImage`: picture ``index`` finished denoising
    step ``step`` of ``steps``."""

    request_id: str
    index: int
    step: int
    steps: int


class Image(Message, tag="image"):
    """One picture of a :class:`GenerateImage`: payload 0 is the encoded file (in the
    request's ``output_format``). ``partial`` is set on an intermediate preview (its
    number, from 0); the finished picture has ``partial`` ``None``."""

    request_id: str
    index: int
    width: int
    height: int
    seed: int
    partial: int | None = None


class Done(Message, tag="done"):
    """The request ended. ``finish_reason`` is ``stop``, ``length`` or ``cancelled``."""

    request_id: str
    finish_reason: str
    usage: Usage = msgspec.field(default_factory=Usage)


class ContextOverflow(msgspec.Struct):
    """The numbers behind a ``context_length_exceeded`` error, so that each API can
    word it its own way: the prompt's tokens, the completion tokens asked for
    (``None``: none were), and the model's context length."""

    prompt_tokens: int
    max_tokens: int | None
    limit: int


class Error(Message, tag="error"):
    """A request failed (``request_id`` set) or the worker cannot serve at all
    (``request_id`` empty, e.g. the model failed to load).

    ``status`` is the HTTP status the gateway should answer with; ``type``,
    ``param`` and ``code`` follow the OpenAI error object; ``overflow`` comes with
    ``code`` ``context_length_exceeded``."""

    message: str
    request_id: str = ""
    status: int = 500
    type: str = "server_error"
    param: str | None = None
    code: str | None = None
    overflow: ContextOverflow | None = None


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
