"""The configuration schema: server and model settings as msgspec Structs, with
their defaults and the kinds of model the gateway serves."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from mlx_gateway.protocol.kinds import KINDS, MODEL_TYPES

SERVABLE_KINDS: tuple[str, ...] = tuple(KINDS)
"""Worker kinds this gateway can run (the kind table); an entry of another kind fails
at load."""

IMAGE_SIZE_MULTIPLE = 16
"""Image models: width and height are multiples of this (mflux: VAE factor 8, patch 2)."""

LOG_LEVELS: tuple[str, ...] = ("debug", "info", "warning", "error", "critical")

_Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]
_Positive = Annotated[int, msgspec.Meta(ge=1)]
_Seconds = Annotated[float, msgspec.Meta(ge=0)]
_PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]
_LogLevel = Literal["debug", "info", "warning", "error", "critical"]
_ApiKey = Annotated[str, msgspec.Meta(min_length=1, pattern=r"^\S+$")]
"""A key: any non-empty string without whitespace."""


class ConfigError(Exception):
    """A config that cannot be used; the message says where and what to change.

    ``file``, ``line`` (1-based), ``key`` (e.g. ``models[1].temperature``) and
    ``model_index`` repeat the location for callers that want it structured.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        key: str | None = None,
        model_index: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.key = key
        self.model_index = model_index


class PeerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Another mlx-gateway or OpenAI-compatible server (an entry of ``server.peers``)."""

    url: Annotated[str, msgspec.Meta(pattern=r"^https?://[^\s/]+")]
    """Its root, ``http://host:port`` (a trailing ``/v1`` is accepted and dropped)."""
    name: str = ""
    """How this gateway names it (``"peer"`` in ``/v1/models``, logs); empty: the
    URL's ``host:port``."""
    api_key: _ApiKey | None = None
    """The key this gateway sends it (``Authorization: Bearer``); the client's own
    key is never passed on."""

    def __post_init__(self) -> None:
        self.url = self.url.rstrip("/")
        if self.url.endswith("/v1"):
            self.url = self.url[: -len("/v1")]
        if not self.name:
            self.name = self.url.split("://", 1)[1].split("/", 1)[0]


class DistributedConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A language model sharded over several processes or Macs, started through
    ``mlx.launch`` (a model entry's ``distributed:`` block; docs/cluster.md)."""

    hosts: Annotated[list[Annotated[str, msgspec.Meta(min_length=1)]], msgspec.Meta(min_length=1)]
    """The machines, as ``ssh`` reaches them; the first one is this machine (rank 0
    talks to the gateway over a local socket). ``127.0.0.1``: a local rank."""
    ranks_per_host: _Positive = 1
    """Processes per host (``mlx.launch -n``)."""
    backend: Literal["ring", "jaccl", "jaccl-ring"] = "ring"
    """``ring``: TCP (Ethernet, Thunderbolt bridge); ``jaccl``: RDMA over Thunderbolt 5,
    every Mac cabled to every other; ``jaccl-ring``: RDMA, each Mac to its neighbours."""
    parallel: Literal["tensor", "pipeline"] = "tensor"
    """How mlx-lm's ``sharded_load`` splits the model: every layer across the ranks
    (``tensor``), or consecutive layers per rank (``pipeline``)."""
    hostfile: str | None = None
    """An ``mlx.distributed_config`` host file (its IPs on the Thunderbolt links);
    replaces ``hosts`` for ``mlx.launch`` when set."""
    python: str | None = None
    """The interpreter on the other hosts (same path as here when unset)."""
    starting_port: _Port | None = None
    """Ring backend: the first TCP port of the ranks (``mlx.launch``'s default when unset)."""


class WyomingConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The Wyoming protocol server (``server.wyoming``): the gateway's speech models
    for Home Assistant (docs/speech.md). Wyoming has no authentication: API keys do
    not apply, so it listens on loopback unless told otherwise."""

    host: Annotated[str, msgspec.Meta(min_length=1)] = "127.0.0.1"
    port: _Port = 10300
    models: list[str] = []
    """Served names (or aliases) of the whisper and tts models offered; empty: all
    of them."""
    languages: list[Annotated[str, msgspec.Meta(min_length=1)]] = msgspec.field(
        default_factory=lambda: ["en"]
    )
    """Languages announced for every model (Home Assistant lists a model for the
    languages it announces), as codes (``en``, ``de``)."""
    zeroconf: bool = False
    """Announce the server on the local network (mDNS ``_wyoming._tcp``) so Home
    Assistant discovers it; needs the ``zeroconf`` package."""


class ServerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Gateway-wide settings (the ``server:`` section)."""

    host: Annotated[str, msgspec.Meta(min_length=1)] = "127.0.0.1"
    port: _Port = 8000
    log_level: _LogLevel = "info"
    log_format: Literal["text", "json"] = "text"
    """``json``: one JSON object per log line (ts, level, logger, model, message)."""
    log_file: str | None = None
    """Also write the log to this file (same format), rotated at ``log_rotation``."""
    log_path: str | None = None
    """A directory: log to ``app.log`` there (mlx-openai-server's key); ``log_file``
    wins when both are set."""
    no_log_file: bool = False
    """``true``: no log file even when ``log_file`` or ``log_path`` is set."""
    log_rotation: str | int = "10MB"
    """Size at which the log file is rotated (``app.log`` → ``app.log.1`` …)."""
    log_retention: Annotated[int, msgspec.Meta(ge=0)] = 5
    """Rotated log files kept beside the current one."""
    api_keys: list[_ApiKey] = []
    """Keys clients must send (``Authorization: Bearer`` or ``x-api-key``); empty:
    no authentication. ``/health`` stays open."""
    admin_keys: list[_ApiKey] = []
    """When set, only these keys open the admin endpoints (load/unload, /metrics)."""
    max_body_mb: Annotated[float, msgspec.Meta(gt=0)] = 32.0
    """Largest request body in MiB (uploads: the model's ``max_upload_mb``) → else 413."""
    runtime_dir: str | None = None
    """Directory for the ZeroMQ socket; ``None``: a private per-process directory."""
    start_timeout: _PositiveSeconds = 600.0
    """Seconds a worker may take to send ``Ready`` (first downloads can be long)."""
    shutdown_grace: _Seconds = 5.0
    """Seconds in-flight work may take to finish when stopping, before signals."""
    memory_budget: str | float = "auto"
    """Memory all workers together may use: ``auto`` (on Apple silicon MLX's
    recommended working set, else 0.75 of RAM), a fraction of RAM (``0.75``) or a
    size (``48GB``, ``512MiB``). Starting a model that does not fit evicts idle ones."""
    queue_timeout: _PositiveSeconds = 300.0
    """Seconds a request may wait for its model to load or for a free slot → 503."""
    hang_timeout: _PositiveSeconds = 120.0
    """A busy worker silent (no heartbeat) this long is killed as hung."""
    step_timeout: _PositiveSeconds | None = None
    """A worker whose current step (a generation step, a request's checks) shows
    no progress this long, while its heartbeats go on, is killed as stuck and its
    requests fail. ``None`` (``auto``): ``hang_timeout``, or 10 times the longest
    step the worker measured when that is more (see ``pool/stall.py``)."""
    min_resident_seconds: _Seconds = 30.0
    """A busy model that blocks another's load stops taking new requests once it
    has been resident this long, so one model's traffic cannot starve another."""
    allow_private_image_urls: bool = False
    """Let vision models' image URLs reach loopback, private and link-local
    addresses (the gateway's own network); a model's own setting wins."""
    image_url_ttl: _PositiveSeconds = 3600.0
    """Seconds a generated image asked for with ``response_format: url`` stays
    downloadable from the gateway."""
    preload_openblas: bool = True
    """Linux: preload the system's OpenBLAS into the workers (``LD_PRELOAD``) when it
    is installed; the ``mlx-cpu`` wheel's own BLAS is several times slower."""
    bytecode_cache: bool = True
    """Keep the workers' compiled Python bytecode in the gateway's cache folder when
    it would not be kept otherwise (``PYTHONDONTWRITEBYTECODE`` set, or read-only
    packages), so that a worker does not compile its imports at every start
    (``pool/bytecode.py``)."""
    image_store_mb: Annotated[float, msgspec.Meta(gt=0)] = 256.0
    """Memory for those images, in MiB; the oldest go first when it is full."""
    response_store_ttl: _PositiveSeconds = 3600.0
    """Responses API: seconds a stored response (``store: true``) can be continued
    with ``previous_response_id`` or fetched with ``GET /v1/responses/{id}``."""
    response_store_mb: Annotated[float, msgspec.Meta(gt=0)] = 64.0
    """Responses API: memory for stored responses, in MiB; the oldest go first."""
    prompt_cache_dir: str | None = None
    """Language models: a directory where KV caches are written when a model stops
    (evicted, idle, unloaded) or an entry leaves the memory prompt cache, and read
    back by a later request with the same token prefix; ``None``: no disk tier."""
    prompt_cache_disk_bytes: str | int = "8GiB"
    """Most bytes the whole ``prompt_cache_dir`` holds; the least recently used files go."""
    spare_workers: bool = False
    """Keep one pre-started worker per kind in use (its backend imported, no model
    loaded, counted in the memory budget) and hand it the next model to load."""
    stream_keepalive: Annotated[float, msgspec.Meta(ge=0.1, le=60)] = 2.0
    """Seconds a started stream may stay silent (the model loads, a long prompt is
    prefilled, the request waits for a slot) before the gateway sends a keep-alive:
    an SSE comment (OpenAI APIs, with the prefill progress) or an ``event: ping``
    (Anthropic Messages)."""
    serve_hub_cache: bool = False
    """List and serve every MLX model already in the local Hugging Face cache, by
    its repo id, with default settings (``config/hub_cache.py``)."""
    peers: list[PeerConfig] = []
    """Other gateways (or OpenAI-compatible servers) whose models this one lists and
    forwards requests to (docs/cluster.md)."""
    peer_check_interval: _PositiveSeconds = 10.0
    """Seconds between two health checks (``GET /v1/models``) of each peer."""
    peer_timeout: _PositiveSeconds = 5.0
    """Seconds to connect to a peer (and for a whole health check) before it counts
    as down."""
    client_keep_alive: bool = True
    """Whether a request's ``keep_alive`` (Ollama's routes; an extra field on the
    OpenAI and Anthropic routes, also as LM Studio's ``ttl``) sets how long its model
    stays loaded after it (a later request without one gets ``idle_timeout`` again,
    as in Ollama); ``false``: ignored, ``idle_timeout`` rules."""
    max_keep_alive: _Seconds | None = None
    """Most seconds a client-set lifetime may keep a model loaded after its last
    request (longer ones, and "forever", are cut to it); ``None``: no cap."""
    wyoming: WyomingConfig | None = None
    """Serve the speech models over the Wyoming protocol too (Home Assistant)."""


class ModelConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One served model (an entry of ``models:``).

    After :func:`load_config`, ``served_model_name`` is set, local paths are
    absolute, and ``model_type`` is known and servable.
    """

    model_path: str
    """A Hugging Face repo id (``org/name``) or a local model directory."""
    served_model_name: str = ""
    """The name clients send as ``model``; empty means ``model_path``."""
    aliases: list[str] = []
    model_type: str = "lm"
    on_demand: bool = True
    """``True``: started by the first request; ``False``: started with the gateway."""
    idle_timeout: _Seconds = 300.0
    """Seconds without requests before the worker is stopped; 0 = never."""
    start_timeout: _PositiveSeconds | None = None
    """Overrides ``server.start_timeout`` for this model."""
    context_length: _Positive | Literal["auto"] | None = None
    """Tokens of prompt + completion; ``auto``: the largest multiple of 1024 (at most
    the model's own) whose KV cache fits the memory budget beside the model, decided
    when its worker starts."""
    max_tokens: _Positive | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0)] | None = None
    top_p: Annotated[float, msgspec.Meta(gt=0, le=1)] | None = None
    top_k: Annotated[int, msgspec.Meta(ge=0)] | None = None
    min_p: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    repetition_penalty: Annotated[float, msgspec.Meta(gt=0)] | None = None
    chat_template_file: str | None = None
    trust_remote_code: bool = False
    max_concurrency: _Positive = 8
    prefill_batch_size: _Positive = 8
    prefill_step_size: _Positive = 2048
    prompt_cache_bytes: str | int = "512MiB"
    """Language models: bytes of KV cache kept after requests end, to reuse the
    longest common token prefix of later prompts (``512MiB``, ``2GB``; 0: off)."""
    kv_bits: Literal[4, 8] | None = None
    """Language and vision models: quantize the KV cache to this many bits (8 halves
    it, 4 quarters it) once a sequence holds ``quantized_kv_start`` tokens."""
    kv_group_size: Literal[32, 64, 128] = 64
    """Elements sharing one scale and bias in the quantized KV cache."""
    quantized_kv_start: Annotated[int, msgspec.Meta(ge=0)] = 0
    """Tokens a sequence holds before its KV cache is quantized (0: from the start)."""
    max_kv_size: Annotated[int, msgspec.Meta(ge=16)] | None = None
    """Language and vision models: keep at most this many tokens of KV cache per
    sequence (a rotating window: older tokens are dropped)."""
    adapters: dict[str, str] = {}
    """Language models: LoRA adapters (id → folder written by ``mlx_lm.lora``) a
    request may pick with its ``adapter`` field; more can be mounted at run time."""
    adapter_path: str | None = None
    """Language models: an adapter mounted as ``default`` and applied to requests that
    name none (mlx_lm.server's ``--adapter-path``)."""
    draft_model_path: str | None = None
    """Language models: a small model with the same tokenizer (a folder or a hub id)
    that proposes tokens for the model to check in one pass (speculative decoding of
    requests that run alone)."""
    num_draft_tokens: _Positive = 3
    """Language models with ``draft_model_path``: tokens the draft proposes a round."""
    prompt_cache_entries: Annotated[int, msgspec.Meta(ge=0)] = 32
    """Language models: most KV caches kept in the prompt cache (0: off)."""
    prompt_cache_dir: str | None = None
    """Language models: overrides ``server.prompt_cache_dir`` for this model."""
    prompt_cache_disk_bytes: str | int | None = None
    """Language models: most bytes of this model's files in the disk tier (default:
    ``server.prompt_cache_disk_bytes``)."""
    stream_interval: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.02
    """Language models: shortest time in seconds between two SSE writes of one
    stream; text generated meanwhile goes out with the next write (0: every step)."""
    tool_call_parser: str = "auto"
    """Language models: the format of the model's tool calls (``hermes``,
    ``qwen3_coder``, ``llama3_json``, ``mistral``, ``function_gemma``, ``gemma4``,
    ``pythonic``, or an alias); ``auto``: the one its chat template shows; ``none``:
    never parse tool calls."""
    reasoning_parser: str = "auto"
    """Language models: the markers of the model's thinking blocks (``think``,
    ``gemma4``, ``mistral``, ``kimi``, ``longcat``, ``seed``, or an alias such as
    ``qwen3``, ``deepseek_r1``); ``auto``: those in its vocabulary; ``none``: keep
    thinking in the answer text."""
    context_overflow: Literal["error", "truncate", "summarize"] = "error"
    """Language and vision models: what a chat prompt too long for the context
    becomes: a 400 ``context_length_exceeded`` (``error``); the conversation without
    its oldest non-system turns (``truncate``); or its older messages summarized by
    the model itself, keeping the system messages and the last 6 (``summarize``)."""
    max_tokens_overflow: Literal["clamp", "error"] = "clamp"
    """Language and vision models: a prompt that fits the context but not with the
    request's ``max_tokens`` (``max_completion_tokens``, ``max_output_tokens``,
    ``num_predict``) runs with the budget cut to what the context has left
    (``clamp``), or is the 400 ``context_length_exceeded`` (``error``, OpenAI's way)."""
    preload_openblas: bool | None = None
    """Overrides ``server.preload_openblas`` for this model's worker."""
    python: str | None = None
    """Interpreter for this model's worker (a backend in its own virtualenv)."""
    worker_env: dict[str, str] = {}
    """Extra environment variables for this model's worker."""
    max_queue: Annotated[int, msgspec.Meta(ge=0)] = 64
    """Requests that may wait in the gateway beyond ``max_concurrency`` → else 429."""
    queue_timeout: _PositiveSeconds | None = None
    """Overrides ``server.queue_timeout`` for this model."""
    pinned: bool = False
    """Never evicted to make room for another model."""
    group: str | None = None
    """Models sharing a group never run at the same time (one evicts the other)."""
    memory_estimate: str | int | None = None
    """This model's memory need (``6GB``) before its worker measured it; default:
    weights on disk times a factor per kind + the KV cache allowance."""
    max_batch_tokens: _Positive | None = None
    """Embeddings models: padded tokens per forward pass (``None``: the worker's
    default, 4096); concurrent requests and long input lists share batches up to it."""
    truncate: bool = False
    """Embeddings models: cut inputs longer than the model's maximum length to it,
    instead of answering 400."""
    max_upload_mb: Annotated[float, msgspec.Meta(gt=0)] = 100.0
    """Largest audio upload accepted for this model, in MiB (speech-to-text models);
    a bigger one is answered with 413."""
    max_input_chars: _Positive = 4096
    """Text-to-speech models: longest ``input`` accepted, in characters → else 400."""
    voice: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    """Text-to-speech models: the voice of requests that name ``default`` (or an
    OpenAI voice the model lacks); ``None``: the model's own default."""
    voices: dict[str, Annotated[str, msgspec.Meta(min_length=1)]] = {}
    """Text-to-speech models: more names for the model's voices (``alloy: af_heart``);
    OpenAI's voice names already mean the default voice unless mapped here."""
    generate_kwargs: dict[str, Any] = {}
    """Text-to-speech models: keyword arguments for the model's mlx-audio
    ``generate`` (``temperature``, ``max_tokens``, ``lang_code``, ``cfg_scale`` …)."""
    max_image_mb: Annotated[float, msgspec.Meta(gt=0)] = 20.0
    """Vision models: largest image file (a ``data:`` URL's bytes or a fetched one),
    in MiB → else 413. Image-edit models: largest uploaded ``image`` or ``mask``."""
    max_images: _Positive = 8
    """Vision models: most images in one request → else 400."""
    image_fetch_timeout: _PositiveSeconds = 10.0
    """Vision models: seconds the gateway may spend fetching one http(s) image URL."""
    allow_private_image_urls: bool | None = None
    """Vision models: overrides ``server.allow_private_image_urls`` for this model."""
    resize_shape: Annotated[list[_Positive], msgspec.Meta(min_length=1, max_length=2)] | None = None
    """Vision models: resize every image to exactly ``[width, height]`` (one number:
    a square) before the model's processor sees it."""
    max_pixels: _Positive | None = None
    """Vision models: scale larger images down to at most this many pixels, keeping
    their aspect ratio."""
    prefix_cache: bool = True
    """Vision models: keep recent prompts' key/value blocks and reuse a repeated
    prefix (mlx-vlm's automatic prefix cache, in memory)."""
    config_name: str | None = None
    """Image models: the mflux preset (``flux2-klein-4b``, ``schnell``, ``dev-kontext``,
    ``qwen-image-edit``, …); left out, mflux infers it from ``model_path``."""
    quantize: Literal[3, 4, 5, 6, 8] | None = None
    """Image models: quantize the weights to this many bits at load."""
    lora_paths: list[str] = []
    """Image models: LoRA adapters (local ``.safetensors`` files or Hugging Face repos)."""
    lora_scales: list[float] = []
    """Image models: one scale per LoRA path (default 1.0 each)."""
    model_config: dict[str, Any] = {}
    """Image models: overrides of mflux's ModelConfig fields for the preset (mapping
    fields such as ``transformer_overrides`` are merged key by key)."""
    steps: Annotated[int, msgspec.Meta(ge=1, le=500)] | None = None
    """Image models: default denoising steps (else mflux's for the preset)."""
    guidance: Annotated[float, msgspec.Meta(ge=0)] | None = None
    """Image models: default guidance scale (else mflux's for the preset)."""
    size: str = "1024x1024"
    """Image models: the ``WxH`` size of a generation that does not ask for one."""
    max_output_pixels: _Positive = 2048 * 2048
    """Image models: the largest ``width * height`` a request may ask for → else 400."""
    distributed: DistributedConfig | None = None
    """Language models: shard the model over several ranks started by ``mlx.launch``."""

    def __post_init__(self) -> None:
        if not self.served_model_name:
            self.served_model_name = self.model_path

    @property
    def names(self) -> tuple[str, ...]:
        """Every name that routes to this model: the served name, then the aliases."""
        return (self.served_model_name, *self.aliases)

    @property
    def fixed_context_length(self) -> int | None:
        """``context_length`` when it is a number (``auto`` is decided at each start)."""
        return None if self.context_length == "auto" else self.context_length

    @property
    def worker_kind(self) -> str:
        """The worker kind that serves this ``model_type`` (``multimodal`` → ``vlm``)."""
        try:
            return MODEL_TYPES[self.model_type]
        except KeyError:
            raise ValueError(f"unknown model_type {self.model_type!r}") from None

    def effective_start_timeout(self, server: ServerConfig) -> float:
        """This model's start timeout, falling back to the server's."""
        return self.start_timeout if self.start_timeout is not None else server.start_timeout

    def effective_queue_timeout(self, server: ServerConfig) -> float:
        """This model's queue timeout, falling back to the server's."""
        return self.queue_timeout if self.queue_timeout is not None else server.queue_timeout


class GatewayConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The whole configuration: server settings and at least one model."""

    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    models: Annotated[list[ModelConfig], msgspec.Meta(min_length=1)]
