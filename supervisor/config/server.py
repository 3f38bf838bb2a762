"""The gateway-wide settings (the ``server:`` section), its peers and its Wyoming
server, as msgspec Structs with their defaults."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from mlx_gateway.supervisor.config.apps import KeyConfig

LOG_LEVELS: tuple[str, ...] = ("debug", "info", "warning", "error", "critical")

_Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]
_Positive = Annotated[int, msgspec.Meta(ge=1)]
_Seconds = Annotated[float, msgspec.Meta(ge=0)]
_PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]
_LogLevel = Literal["debug", "info", "warning", "error", "critical"]
_ApiKey = Annotated[str, msgspec.Meta(min_length=1, pattern=r"^\S+$")]
"""A key: any non-empty string without whitespace."""


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
    key: str | None = None
    """The ``server.keys`` app (by its ``name``) Wyoming acts as: its models are the
    only ones offered (beside ``models``); ``None``: no app's scope applies."""


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
    keys: list[KeyConfig] = []
    """Keys as apps: each with its name, models, role, priority and limits
    (:mod:`.apps`); ``api_keys`` and ``admin_keys`` are shorthand beside them."""
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
    usage: bool = True
    """Record what each answered request used (app, model, kind, tokens, audio,
    images, time, status) in the usage database (``GET /v1/usage``,
    ``mlx-gateway usage``); ``false``: nothing is written."""
    usage_path: str | None = None
    """The usage database (SQLite); ``None``: ``usage.sqlite3`` in the gateway's
    state folder (``$MLX_GATEWAY_CACHE_DIR``, default ``~/.cache/mlx-gateway``)."""
    usage_retention_days: Annotated[float, msgspec.Meta(gt=0)] = 90.0
    """Days a usage row is kept; older ones are deleted (at start and hourly)."""
    prompt_cache_dir: str | None = None
    """Language models: a directory where KV caches are written when a model stops
    (evicted, idle, unloaded) or an entry leaves the memory prompt cache, and read
    back by a later request with the same token prefix; ``None``: no disk tier."""
    prompt_cache_disk_bytes: str | int = "8GiB"
    """Most bytes the whole ``prompt_cache_dir`` holds; the least recently used files go."""
    batch_duty: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.5
    """The share of the time batch work (``priority: batch``, ``service_tier: flex``)
    on other models may take once every interactive request has its first token
    (before that it takes none); ``0`` holds it until the last interactive request
    ends, ``1`` lets it run freely after the first token."""
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
    serve_ollama_library: bool = False
    """List and serve every model in Ollama's store (``$OLLAMA_MODELS``, default
    ``~/.ollama/models``) by its Ollama name, its GGUF blob read in place
    (``config/libraries.py``)."""
    serve_lmstudio_library: bool = False
    """List and serve every model in LM Studio's folder (its ``downloadsFolder``,
    default ``~/.lmstudio/models``): MLX folders as they are, GGUF files converted
    (``config/libraries.py``)."""
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
    default_keep_alive: _Seconds = 300.0
    """The ``idle_timeout`` of every entry that sets none (pulled and hub-cache
    models too): seconds a model stays loaded after its last request when the
    request named no ``keep_alive``; 0 = never stopped, as ``idle_timeout``."""
    max_keep_alive: _Seconds | None = None
    """Most seconds a client-set lifetime may keep a model loaded after its last
    request (longer ones, and "forever", are cut to it); ``None``: no cap."""
    wyoming: WyomingConfig | None = None
    """Serve the speech models over the Wyoming protocol too (Home Assistant)."""
