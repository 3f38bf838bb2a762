"""Worker → gateway: readiness, progress and heartbeats, and each request's
``Started`` … ``Done`` (or ``Error``) with what it produced. See :mod:`.messages`
for the reply sequence."""

from __future__ import annotations

from typing import Any

import msgspec

from mlx_gateway.protocol.parts import Memory, Message, ModelFacts, TokenLogprob, Usage


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
    float32 matrix of ``rows`` by ``dims``: one row per input, or for a multi-vector
    model every input's rows in input order, ``vectors[i]`` of them for input ``i``."""

    request_id: str
    rows: int
    dims: int
    prompt_tokens: int = 0
    vectors: list[int] = []


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
