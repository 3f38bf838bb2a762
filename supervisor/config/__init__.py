"""Gateway configuration: a YAML file turned into validated msgspec Structs.

:func:`load_config` reads the file, :func:`config_from_model_path` builds the same
structures for ``mlx-gateway launch --model-path X``. Both run one pipeline:

1. parse the YAML (safe constructors only) and remember the line of every key and
   value (``yaml.compose`` node marks);
2. normalize the raw mapping into our schema: accept the keys of
   cubist38/mlx-openai-server configs (renaming the ones we act on, warning about the
   ones we ignore), reject unknown keys with a close-match suggestion;
3. convert with msgspec (types and ranges) and translate its error path
   (``$.models[1].temperature``) back to the key the user wrote and its line;
4. check what types cannot express: model kinds, local paths, unique names.

Every problem raises :class:`ConfigError`, whose message names the file, the line,
the key path, the model entry, and what to change.

Invariant: this module never imports MLX or a backend (it runs in the gateway).
"""

from __future__ import annotations

import difflib
import logging
import math
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, TypeVar

import msgspec
import yaml

from mlx_gateway.supervisor.engine.parsers.formats import TOOL_PARSER_CHOICES
from mlx_gateway.supervisor.engine.parsers.reasoning import REASONING_CHOICES

__all__ = [
    "LOG_LEVELS",
    "MODEL_TYPES",
    "SERVABLE_KINDS",
    "ConfigError",
    "GatewayConfig",
    "ModelConfig",
    "ServerConfig",
    "config_from_model_path",
    "load_config",
    "override_server",
]

log = logging.getLogger(__name__)

MODEL_TYPES: dict[str, str] = {
    "lm": "lm",
    "vlm": "vlm",
    "multimodal": "vlm",
    "embeddings": "embeddings",
    "whisper": "whisper",
    "image-generation": "image",
    "image-edit": "image",
    "image": "image",
}
"""Every ``model_type`` a config may name, mapped to the worker kind that serves it."""

SERVABLE_KINDS: tuple[str, ...] = ("lm", "embeddings", "whisper", "vlm", "image")
"""Worker kinds this gateway can run today; an entry of another kind fails at load."""

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


class ServerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Gateway-wide settings (the ``server:`` section)."""

    host: Annotated[str, msgspec.Meta(min_length=1)] = "127.0.0.1"
    port: _Port = 8000
    log_level: _LogLevel = "info"
    log_format: Literal["text", "json"] = "text"
    """``json``: one JSON object per log line (ts, level, logger, model, message)."""
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
    memory_budget: str | float = 0.75
    """Memory all workers together may use: a fraction of RAM (``0.75``) or a size
    (``48GB``, ``512MiB``). Starting a model that does not fit evicts idle ones."""
    queue_timeout: _PositiveSeconds = 300.0
    """Seconds a request may wait for its model to load or for a free slot → 503."""
    hang_timeout: _PositiveSeconds = 120.0
    """A busy worker silent (no heartbeat) this long is killed as hung."""
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
    image_store_mb: Annotated[float, msgspec.Meta(gt=0)] = 256.0
    """Memory for those images, in MiB; the oldest go first when it is full."""
    response_store_ttl: _PositiveSeconds = 3600.0
    """Responses API: seconds a stored response (``store: true``) can be continued
    with ``previous_response_id`` or fetched with ``GET /v1/responses/{id}``."""
    response_store_mb: Annotated[float, msgspec.Meta(gt=0)] = 64.0
    """Responses API: memory for stored responses, in MiB; the oldest go first."""
    stream_keepalive: Annotated[float, msgspec.Meta(ge=0.1, le=60)] = 2.0
    """Seconds a started stream may stay silent (the model loads, a long prompt is
    prefilled, the request waits for a slot) before the gateway sends a keep-alive:
    an SSE comment (OpenAI APIs, with the prefill progress) or an ``event: ping``
    (Anthropic Messages)."""


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
    context_length: _Positive | None = None
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
    prompt_cache_entries: Annotated[int, msgspec.Meta(ge=0)] = 32
    """Language models: most KV caches kept in the prompt cache (0: off)."""
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

    def __post_init__(self) -> None:
        if not self.served_model_name:
            self.served_model_name = self.model_path

    @property
    def names(self) -> tuple[str, ...]:
        """Every name that routes to this model: the served name, then the aliases."""
        return (self.served_model_name, *self.aliases)

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


# --------------------------------------------------------------------------- keys

_SERVER_KEYS = frozenset(ServerConfig.__struct_fields__)
_MODEL_KEYS = frozenset(ModelConfig.__struct_fields__)
_DURATION_KEYS = frozenset(
    {
        "start_timeout",
        "shutdown_grace",
        "idle_timeout",
        "queue_timeout",
        "hang_timeout",
        "min_resident_seconds",
        "image_fetch_timeout",
        "image_url_ttl",
        "response_store_ttl",
        "stream_keepalive",
    }
)

# mlx-openai-server keys, both of its `server:` section and of its older "hub" files
# that put server keys at the top level.
_SERVER_RENAMES = {"model_load_timeout": "start_timeout"}
_SERVER_IGNORED = frozenset(
    {
        "log_file",
        "no_log_file",
        "log_rotation",
        "log_retention",
        "log_path",
        "max_loaded_models",
        "model_starting_port",
        "enable_status_page",
    }
)
_TOP_IGNORED = frozenset({"groups"})

# mlx-openai-server per-model keys we act on, with the field they set.
_MODEL_RENAMES = {
    "on_demand_idle_timeout": "idle_timeout",
    "jit_enabled": "on_demand",
    "default_max_tokens": "max_tokens",
    "default_temperature": "temperature",
    "default_top_p": "top_p",
    "default_top_k": "top_k",
    "default_min_p": "min_p",
    "default_repetition_penalty": "repetition_penalty",
    "batch_completion_size": "max_concurrency",
    "batch_prefill_size": "prefill_batch_size",
    "batch_prefill_step_size": "prefill_step_size",
    "prompt_cache_size": "prompt_cache_entries",
    "prompt_cache_max_bytes": "prompt_cache_bytes",
}
# Keys handled one by one in _normalize_model.
_MODEL_SPECIAL = frozenset(
    {"model_id", "name", "version", "auto_unload_minutes", "disable_batching"}
)
# mlx-openai-server per-model keys accepted and ignored (with a warning) for now.
_MODEL_IGNORED = frozenset(
    {
        "queue_timeout",
        "queue_size",
        "lora_paths_str",
        "lora_scales_str",
        "disable_auto_resize",
        "enable_auto_tool_choice",
        "message_converter",
        "debug",
        "pipeline",
        "prompt_cache_dir",
        "draft_model_path",
        "num_draft_tokens",
        "kv_bits",
        "kv_group_size",
        "quantized_kv_start",
        "default_presence_penalty",
        "default_xtc_probability",
        "default_xtc_threshold",
        "default_seed",
        "default_repetition_context_size",
        "group",
        "default",
        "is_default_model",
        "host",
        "port",
        "log_level",
        "log_file",
        "no_log_file",
        "enable_status_page",
    }
)

_SERVER_ACCEPTED = _SERVER_KEYS | _SERVER_RENAMES.keys() | _SERVER_IGNORED
_MODEL_ACCEPTED = _MODEL_KEYS | _MODEL_RENAMES.keys() | _MODEL_SPECIAL | _MODEL_IGNORED

# --------------------------------------------------------------------------- YAML

_KeyPath = tuple[str | int, ...]
_T = TypeVar("_T")


class _Pos(NamedTuple):
    key_line: int
    value_line: int


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _DuplicateKey(Exception):
    def __init__(self, key: str, first: int, again: int) -> None:
        super().__init__(key)
        self.key, self.first, self.again = key, first, again


def _check_duplicate_keys(node: yaml.Node, seen_nodes: set[int]) -> None:
    """Refuse a key given twice in one mapping (PyYAML would keep the last silently).

    Runs on the composed tree, before merge keys (``<<:``) are flattened into it:
    keys brought in by a merge may be overridden.
    """
    if id(node) in seen_nodes:  # aliases share nodes; recursive documents loop
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE_TAG:
                line = key_node.start_mark.line + 1
                if key_node.value in lines:
                    raise _DuplicateKey(key_node.value, lines[key_node.value], line)
                lines[key_node.value] = line
            _check_duplicate_keys(value_node, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_duplicate_keys(item, seen_nodes)


def _parse_yaml(text: str, file: str) -> tuple[Any, dict[_KeyPath, _Pos]]:
    """The document's data and the line of every key/item down to a few levels."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, {}
        _check_duplicate_keys(node, set())
        data = loader.construct_document(node)
        positions: dict[_KeyPath, _Pos] = {}
        _record_positions(loader, node, (), positions)
        return data, positions
    except _DuplicateKey as exc:
        raise ConfigError(
            f"duplicate key '{exc.key}' at {file}:{exc.again} (first given at line "
            f"{exc.first}); keep one of them",
            file=file,
            line=exc.again,
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        where = f"{file}:{line}" if line else file
        problem = exc.problem or exc.context or "malformed YAML"
        raise ConfigError(f"{where}: not valid YAML: {problem}", file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: not valid YAML: {exc}", file=file) from None
    finally:
        loader.dispose()


def _record_positions(
    loader: yaml.SafeLoader, node: yaml.Node, path: _KeyPath, out: dict[_KeyPath, _Pos]
) -> None:
    if len(path) > 5:  # deep enough for every key we check; also stops alias cycles
        return
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            try:
                key = loader.construct_object(key_node, deep=True)
                hash(key)
            except Exception:  # an unhashable key already failed construction
                continue
            child = (*path, key)
            # Later pairs win, as in the constructed dict (keys merged with `<<:`).
            out[child] = _Pos(key_node.start_mark.line + 1, value_node.start_mark.line + 1)
            _record_positions(loader, value_node, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, index)
            line = item.start_mark.line + 1
            out[child] = _Pos(line, line)
            _record_positions(loader, item, child, out)


# --------------------------------------------------------------------------- helpers

_DURATION_RE = re.compile(
    r"^\s*(?:(?P<h>\d+(?:\.\d+)?)\s*h)?\s*(?:(?P<m>\d+(?:\.\d+)?)\s*m(?:in)?)?"
    r"\s*(?:(?P<s>\d+(?:\.\d+)?)\s*s)?\s*$",
    re.IGNORECASE,
)


def _parse_duration(text: str) -> float | None:
    """Seconds in ``"300"``, ``"90s"``, ``"5m"``, ``"1h30m"``; ``None`` if not one."""
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        return value if math.isfinite(value) else None
    match = _DURATION_RE.match(text)
    if match is None or not any(match.groupdict().values()):
        return None
    hours, minutes, seconds = (float(match.group(g) or 0) for g in ("h", "m", "s"))
    return hours * 3600 + minutes * 60 + seconds


def _show(value: Any) -> str:
    """A value as the user would recognize it from YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return str(value)


def _suggest(key: str, candidates: Iterable[str]) -> str | None:
    matches = difflib.get_close_matches(key, sorted(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def _display(path: _KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class _Ctx:
    """Where values came from, to turn a key path into ``file:line`` and a label."""

    def __init__(self, file: str | None, base_dir: Path, positions: dict[_KeyPath, _Pos]):
        self.file = file
        self.base_dir = base_dir
        self.positions = positions
        # normalized path → (path as the user wrote it, its position in the file)
        self.origin: dict[_KeyPath, tuple[_KeyPath, _Pos | None]] = {}
        self.labels: dict[int, str] = {}

    def track(self, normalized: _KeyPath, written: _KeyPath) -> None:
        self.origin[normalized] = (written, self.positions.get(written))

    def locate(self, path: _KeyPath) -> tuple[_KeyPath, _Pos | None]:
        """The written path and position for ``path``, or for its closest parent."""
        for cut in range(len(path), -1, -1):
            prefix = path[:cut]
            if prefix in self.origin:
                written, pos = self.origin[prefix]
                return (*written, *path[cut:]), pos
            if prefix in self.positions:
                return path, self.positions[prefix]
        return path, None

    def where(self, pos: _Pos | None, *, key: bool = False) -> str:
        if self.file is None:
            return ""
        if pos is None:
            return f" in {self.file}"
        return f" at {self.file}:{pos.key_line if key else pos.value_line}"

    def model_index(self, path: _KeyPath) -> int | None:
        if len(path) >= 2 and path[0] == "models" and isinstance(path[1], int):
            return path[1]
        return None

    def error(
        self, path: _KeyPath, problem: str, *, key: bool = False, as_written: bool = False
    ) -> ConfigError:
        """``models[0].idle_timeout at config.yaml:7 (model 'qwen'): <problem>``.

        ``path`` is in our schema unless ``as_written`` (then it is the file's own).
        """
        if as_written:
            written, pos = path, self.positions.get(path)
        else:
            written, pos = self.locate(path)
        index = self.model_index(path)
        label = f" (model {self.labels[index]!r})" if index in self.labels else ""
        text = _display(written) or "config"
        line = (pos.key_line if key else pos.value_line) if pos else None
        return ConfigError(
            f"{text}{self.where(pos, key=key)}{label}: {problem}",
            file=self.file,
            line=line,
            key=_display(written) or None,
            model_index=index,
        )

    def unknown_key(self, section: _KeyPath, key: Any, accepted: frozenset[str]) -> ConfigError:
        """``unknown key 'temprature' in models[1] ('qwen') at config.yaml:12; did you mean…``."""
        pos = self.positions.get((*section, key))
        index = self.model_index(section)
        place = ""
        if section:
            place = f" in {_display(section)}"
            if index in self.labels:
                place += f" ({self.labels[index]!r})"
        name = str(key)
        if index is not None and name in _SERVER_ACCEPTED | _TOP_IGNORED:
            hint = f"'{name}' is a server setting: move it under 'server:'"
        elif section != ("models",) and index is None and name in _MODEL_ACCEPTED:
            hint = f"'{name}' is a per-model setting: move it into an entry of 'models:'"
        elif (match := _suggest(name, accepted)) is not None:
            hint = f"did you mean '{match}'?"
        else:
            hint = "see docs/configuration.md for the accepted keys"
        return ConfigError(
            f"unknown key '{name}'{place}{self.where(pos, key=True)}; {hint}",
            file=self.file,
            line=pos.key_line if pos else None,
            key=_display((*section, name)),
            model_index=index,
        )


def _duration(ctx: _Ctx, path: _KeyPath, value: Any) -> Any:
    """A duration key's value as seconds; strings like ``5m`` are accepted."""
    if not isinstance(value, str):
        return value  # numbers (and wrong types) go on to msgspec
    seconds = _parse_duration(value)
    if seconds is None:
        raise ctx.error(
            path,
            f"expected a number, got {_show(value)}; give seconds (300) or a duration "
            "such as '90s', '5m' or '1h30m'",
        )
    return seconds


# --------------------------------------------------------------------------- normalize


def _normalize(ctx: _Ctx, root: Any) -> dict[str, Any]:
    """The raw document in our schema, ready for msgspec."""
    name = ctx.file or "config"
    if root is None:
        raise ConfigError(
            f"{name}: the file is empty; it needs a 'models:' list with at least one "
            "entry giving a model_path (see config.example.yaml)",
            file=ctx.file,
        )
    if not isinstance(root, dict):
        raise ConfigError(
            f"{name}: the top level must be a mapping with a 'models:' list, got {_show(root)}",
            file=ctx.file,
            line=1,
        )
    server_sources: list[tuple[_KeyPath, Any]] = []
    for key, value in root.items():
        if key in ("server", "models"):
            continue
        if isinstance(key, str) and key.startswith("x-"):
            continue  # a place for YAML anchors, as in docker-compose files
        if key in _TOP_IGNORED:
            _warn_ignored(ctx, (), [key])
        elif isinstance(key, str) and key in _SERVER_ACCEPTED:
            # mlx-openai-server "hub" files put the server keys at the top level.
            server_sources.append(((key,), value))
        else:
            raise ctx.unknown_key((), key, frozenset({"server", "models"}) | _SERVER_ACCEPTED)

    section = root.get("server")
    if section is not None and not isinstance(section, dict):
        raise ctx.error(("server",), f"expected a mapping of server settings, got {_show(section)}")
    for key, value in (section or {}).items():
        if not isinstance(key, str) or key not in _SERVER_ACCEPTED:
            raise ctx.unknown_key(("server",), key, _SERVER_ACCEPTED)
        server_sources.append((("server", key), value))
    server = _normalize_server(ctx, server_sources)

    if "models" not in root:
        raise ConfigError(
            f"{name}: no 'models:' list; add one with at least one entry giving a "
            "model_path (see config.example.yaml)",
            file=ctx.file,
        )
    models = root["models"]
    if models is None or models == []:
        raise ctx.error(("models",), "the list is empty; add at least one entry with a model_path")
    if not isinstance(models, list):
        raise ctx.error(
            ("models",),
            f"expected a list of model entries ('- model_path: ...'), got {_show(models)}",
        )
    return {"server": server, "models": [_normalize_model(ctx, i, m) for i, m in enumerate(models)]}


def _normalize_server(ctx: _Ctx, sources: list[tuple[_KeyPath, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    set_by: dict[str, _KeyPath] = {}
    ignored: list[_KeyPath] = []
    for written, value in sources:
        key = str(written[-1])
        if key in _SERVER_IGNORED:
            ignored.append(written)
            continue
        if value is None:  # `key:` with nothing after it: keep the default
            continue
        field = _SERVER_RENAMES.get(key, key)
        if field in set_by:
            raise ctx.error(
                written,
                f"{_display(set_by[field])}{_line_note(ctx, set_by[field])} already sets "
                f"{field}; keep only one of them",
                key=True,
                as_written=True,
            )
        set_by[field] = written
        ctx.track(("server", field), written)
        if field in _DURATION_KEYS:
            value = _duration(ctx, ("server", field), value)
        elif field == "log_level" and isinstance(value, str):
            value = value.strip().lower()
            value = "warning" if value == "warn" else value
        elif field == "runtime_dir" and isinstance(value, str):
            value = _absolute(ctx.base_dir, value)
        out[field] = value
    if ignored:
        _warn_ignored_paths(ctx, "server", ignored)
    return out


def _line_note(ctx: _Ctx, written: _KeyPath) -> str:
    pos = ctx.positions.get(written)
    return f" (line {pos.key_line})" if pos else ""


def _normalize_model(ctx: _Ctx, index: int, raw: Any) -> dict[str, Any]:
    here: _KeyPath = ("models", index)
    if not isinstance(raw, dict):
        raise ctx.error(here, f"expected a mapping with at least a model_path, got {_show(raw)}")
    for key in ("served_model_name", "model_id", "name", "model_path"):
        if isinstance(raw.get(key), str) and raw[key]:
            ctx.labels[index] = raw[key]
            break
    if "model_path" not in raw:
        raise ctx.error(
            here, "missing required key 'model_path' (a Hugging Face repo id or a local directory)"
        )

    out: dict[str, Any] = {}
    set_by: dict[str, str] = {}
    ignored: list[str] = []
    names: dict[str, Any] = {}  # served_model_name / model_id / name / version
    unbatched = False

    def assign(field: str, key: str, value: Any) -> None:
        if field in set_by:
            raise ctx.error(
                (*here, key),
                f"'{set_by[field]}'{_line_note(ctx, (*here, set_by[field]))} already sets "
                f"{field}; keep only one of them",
                key=True,
                as_written=True,
            )
        set_by[field] = key
        ctx.track((*here, field), (*here, key))
        out[field] = value

    for key, value in raw.items():
        if not isinstance(key, str) or key not in _MODEL_ACCEPTED:
            raise ctx.unknown_key(here, key, _MODEL_ACCEPTED)
        if key in _MODEL_IGNORED:
            ignored.append(key)
            continue
        if value is None and key != "model_path":
            continue  # `key:` with nothing after it: keep the default
        if key in ("served_model_name", "model_id", "name", "version"):
            names[key] = value
        elif key == "auto_unload_minutes":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ctx.error((*here, key), f"expected a number of minutes, got {_show(value)}")
            assign("idle_timeout", key, value * 60)
        elif key == "disable_batching":
            if not isinstance(value, bool):
                raise ctx.error((*here, key), f"expected true or false, got {_show(value)}")
            unbatched = value
        elif key == "worker_env":
            assign("worker_env", key, _worker_env(ctx, (*here, key), value))
        else:
            field = _MODEL_RENAMES.get(key, key)
            if field in _DURATION_KEYS:
                value = _duration(ctx, (*here, key), value)
            elif field in ("chat_template_file", "python") and isinstance(value, str):
                value = value.strip()
            assign(field, key, value)

    if unbatched:  # a switch: it wins over any batch size given beside it
        out["max_concurrency"] = 1
        ctx.track((*here, "max_concurrency"), (*here, "disable_batching"))
    _normalize_names(ctx, here, names, out)
    if ignored:
        _warn_ignored(ctx, here, ignored)
    return out


def _normalize_names(ctx: _Ctx, here: _KeyPath, names: dict[str, Any], out: dict[str, Any]) -> None:
    """``served_model_name`` and its mlx-openai-server spellings; extras become aliases."""
    extra: list[tuple[str, str]] = []  # (alias, key it came from)
    for key in ("served_model_name", "model_id", "name"):
        if key not in names:
            continue
        value = names[key]
        if not isinstance(value, str):
            raise ctx.error((*here, key), f"expected a string, got {_show(value)}")
        if "served_model_name" not in out:
            out["served_model_name"] = value
            ctx.track((*here, "served_model_name"), (*here, key))
        elif value != out["served_model_name"]:
            extra.append((value, key))
    if "version" in names:
        version = names["version"]
        if isinstance(version, bool) or not isinstance(version, str | int | float):
            raise ctx.error((*here, "version"), f"expected a string, got {_show(version)}")
        base = out.get("served_model_name", out.get("model_path"))
        if isinstance(base, str):
            extra.append((f"{base}:{version}", "version"))
    aliases = out.get("aliases", [])
    if extra and isinstance(aliases, list):
        written = [(*here, "aliases", i) for i in range(len(aliases))]
        out["aliases"] = [*aliases, *(alias for alias, _ in extra)]
        for i, path in enumerate(written):
            ctx.track((*here, "aliases", i), path)
        for j, (_, key) in enumerate(extra, start=len(aliases)):
            ctx.track((*here, "aliases", j), (*here, key))


def _worker_env(ctx: _Ctx, path: _KeyPath, value: Any) -> Any:
    if not isinstance(value, dict):
        raise ctx.error(path, f"expected a mapping of NAME: value, got {_show(value)}")
    env: dict[str, str] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not name or "=" in name:
            raise ctx.error(
                (*path, name), f"{_show(name)} is not a valid environment variable name", key=True
            )
        if isinstance(item, bool) or item is None or not isinstance(item, str | int | float):
            raise ctx.error(
                (*path, name),
                f'expected a string, got {_show(item)}; quote the value, e.g. {name}: "1"',
            )
        env[name] = str(item)
    return env


def _warn_ignored(ctx: _Ctx, section: _KeyPath, keys: list[str]) -> None:
    _warn_ignored_paths(ctx, _display(section) or "top level", [(*section, k) for k in keys])


def _warn_ignored_paths(ctx: _Ctx, where: str, paths: list[_KeyPath]) -> None:
    index = ctx.model_index(paths[0])
    if index in ctx.labels:
        where += f" ({ctx.labels[index]!r})"
    listed = ", ".join(
        f"{p[-1]} (line {ctx.positions[p].key_line})" if p in ctx.positions else str(p[-1])
        for p in paths
    )
    prefix = f"{ctx.file}: " if ctx.file else ""
    log.warning(
        "%s%s: accepted for mlx-openai-server compatibility but not used by this gateway yet: %s",
        prefix,
        where,
        listed,
    )


# --------------------------------------------------------------------------- convert

_MSGSPEC_RE = re.compile(r"^(?P<msg>.*?)(?: - at `(?P<path>\$[^`]*)`)?$", re.DOTALL)
_EXPECTED_RE = re.compile(
    r"^Expected `(?P<types>[^`]+)`(?P<length> of length)?(?: (?P<op>>=|<=|>|<) (?P<bound>\S+))?"
    r"(?:, got `(?P<got>[^`]+)`)?$"
)
_PATH_PART_RE = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
    "array": "a list",
    "object": "a mapping",
}
_TYPE_HINTS = {
    "array": "write a YAML list, e.g. [a, b]",
    "bool": "write true or false",
    "str": "quote the value",
}


def _msgspec_path(text: str | None) -> _KeyPath:
    if not text:
        return ()
    return tuple(name if name else int(number) for name, number in _PATH_PART_RE.findall(text[1:]))


def _lookup(data: Any, path: _KeyPath) -> Any:
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _number(text: str) -> str:
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value.is_integer() else text


def _convert(ctx: _Ctx, data: dict[str, Any], into: type[_T], at: _KeyPath = ()) -> _T:
    """``msgspec.convert`` whose errors name the key as written and its line."""
    try:
        return msgspec.convert(data, into)
    except msgspec.ValidationError as exc:
        match = _MSGSPEC_RE.match(str(exc))
        assert match is not None  # the pattern matches any text
        path = _msgspec_path(match.group("path"))
        value = _lookup(data, path)
        raise ctx.error((*at, *path), _explain(match.group("msg"), path, value)) from None


def _explain(message: str, path: _KeyPath, value: Any) -> str:
    """A msgspec validation message in the words of the YAML file."""
    if (m := _EXPECTED_RE.match(message)) is not None:
        types = [t for t in m.group("types").split(" | ") if t != "null"] or ["null"]
        words = " or ".join(_TYPE_WORDS.get(t, t) for t in types)
        if m.group("length"):
            what = "string" if types == ["str"] else "list"
            if m.group("op") in ("<", "<="):
                items = "characters" if what == "string" else "items"
                return f"expected a {what} of at most {m.group('bound')} {items}"
            return f"expected a non-empty {what}"
        if m.group("op"):
            return (
                f"expected {words} {m.group('op')} {_number(m.group('bound'))}, got {_show(value)}"
            )
        hint = _TYPE_HINTS.get(types[0]) if len(types) == 1 and value is not None else None
        return f"expected {words}, got {_show(value)}" + (f"; {hint}" if hint else "")
    if message.startswith("Invalid enum value"):
        allowed = ", ".join(LOG_LEVELS) if path[-1:] == ("log_level",) else None
        return f"{_show(value)} is not allowed" + (f"; use one of: {allowed}" if allowed else "")
    if (m := re.match(r"Object missing required field `(.+)`", message)) is not None:
        return f"missing required key '{m.group(1)}'"
    return message


# --------------------------------------------------------------------------- checks


def _absolute(base: Path, value: str) -> str:
    return os.path.abspath(os.path.join(base, os.path.expanduser(value)))


def _looks_local(base: Path, path: str) -> bool:
    """A local directory rather than a Hugging Face ``org/name`` repo id."""
    return (
        path.startswith(("/", "./", "../", "~"))
        or path in (".", "..")
        or path.count("/") > 1
        or os.path.exists(os.path.join(base, os.path.expanduser(path)))
    )


def _check_sizes(ctx: _Ctx, config: GatewayConfig) -> None:
    from mlx_gateway.supervisor.pool.memory import budget_bytes, parse_size

    try:
        budget_bytes(config.server.memory_budget, total=1)
    except ValueError as exc:
        raise ctx.error(("server", "memory_budget"), str(exc)) from None
    for i, model in enumerate(config.models):
        if model.memory_estimate is not None:
            try:
                parse_size(model.memory_estimate)
            except ValueError as exc:
                raise ctx.error(("models", i, "memory_estimate"), str(exc)) from None
        try:
            if parse_size(model.prompt_cache_bytes) < 0:
                raise ValueError(f"expected a size ≥ 0, got {model.prompt_cache_bytes!r}")
        except ValueError as exc:
            raise ctx.error(("models", i, "prompt_cache_bytes"), str(exc)) from None


def _check(ctx: _Ctx, config: GatewayConfig) -> None:
    _check_sizes(ctx, config)
    seen: dict[str, _KeyPath] = {}
    for i, model in enumerate(config.models):
        here: _KeyPath = ("models", i)
        clash = model.served_model_name in seen
        ctx.labels[i] = model.model_path if clash else model.served_model_name
        _check_kind(ctx, here, model)
        _check_paths(ctx, here, model)
        _check_image(ctx, here, model)
        _check_parsers(ctx, here, model)
        for path, name in _name_paths(ctx, here, model):
            if not name.strip() or any(c.isspace() for c in name):
                raise ctx.error(
                    path, f"{_show(name)} cannot be a model name: it is blank or has spaces"
                )
            if name in seen:
                other = seen[name]
                written, pos = ctx.locate(other)
                at = f" at {ctx.file}:{pos.value_line}" if ctx.file and pos else ""
                j = ctx.model_index(other)
                owner = "this same entry" if j == i else f"models[{j}] ({ctx.labels.get(j, '?')!r})"
                raise ctx.error(
                    path,
                    f"the name {name!r} is already used by {owner} as its "
                    f"{_display(written[2:])}{at}; every served_model_name and alias must be "
                    "unique across the file",
                )
            seen[name] = path


def _name_paths(ctx: _Ctx, here: _KeyPath, model: ModelConfig) -> list[tuple[_KeyPath, str]]:
    served = (*here, "served_model_name")
    if served not in ctx.origin:  # defaulted to model_path
        served = (*here, "model_path")
    return [
        (served, model.served_model_name),
        *(((*here, "aliases", j), alias) for j, alias in enumerate(model.aliases)),
    ]


_EMBEDDINGS_ONLY: dict[str, Any] = {"max_batch_tokens": None, "truncate": False}
"""Per-model keys of embeddings models, with their defaults."""

_VISION_ONLY: dict[str, Any] = {
    "max_images": 8,
    "image_fetch_timeout": 10.0,
    "allow_private_image_urls": None,
    "resize_shape": None,
    "max_pixels": None,
    "prefix_cache": True,
}
"""Per-model keys of vision models (``vlm``), with their defaults."""


def _check_kind(ctx: _Ctx, here: _KeyPath, model: ModelConfig) -> None:
    kind = MODEL_TYPES.get(model.model_type)
    if kind is None:
        close = _suggest(model.model_type, list(MODEL_TYPES))
        raise ctx.error(
            (*here, "model_type"),
            f"unknown model_type {model.model_type!r}; allowed: {', '.join(MODEL_TYPES)}"
            + (f" (did you mean '{close}'?)" if close else ""),
        )
    if kind not in SERVABLE_KINDS:
        servable = ", ".join(t for t, k in MODEL_TYPES.items() if k in SERVABLE_KINDS)
        raise ctx.error(
            (*here, "model_type"),
            f"model_type {model.model_type!r} is not supported yet by this gateway "
            f"(supported now: {servable}); remove this entry or serve it elsewhere for now",
        )
    if kind != "embeddings":
        for key, default in _EMBEDDINGS_ONLY.items():
            if getattr(model, key) != default:
                raise ctx.error(
                    (*here, key),
                    f"{key} applies to embeddings models only, and this entry's "
                    f"model_type is {model.model_type!r}; remove it",
                )
    if kind != "vlm":
        for key, default in _VISION_ONLY.items():
            if getattr(model, key) != default:
                raise ctx.error(
                    (*here, key),
                    f"{key} applies to vision models (model_type vlm) only, and this "
                    f"entry's model_type is {model.model_type!r}; remove it",
                )


def _check_paths(ctx: _Ctx, here: _KeyPath, model: ModelConfig) -> None:
    base = ctx.base_dir
    written = model.model_path.strip()
    if not written:
        raise ctx.error((*here, "model_path"), "model_path is empty")
    if _looks_local(base, written):
        resolved = _absolute(base, written)
        if not os.path.isdir(resolved):
            state = "is not a directory" if os.path.exists(resolved) else "does not exist"
            raise ctx.error(
                (*here, "model_path"),
                f"local model directory {resolved!r} {state}; fix the path (relative paths "
                "start from the config file's folder) or give a Hugging Face repo id "
                "'org/name'",
            )
        model.model_path = resolved
    if model.chat_template_file is not None:
        resolved = _absolute(base, model.chat_template_file)
        if not os.path.isfile(resolved):
            raise ctx.error(
                (*here, "chat_template_file"),
                f"chat template file {resolved!r} does not exist; fix the path (relative "
                "paths start from the config file's folder)",
            )
        model.chat_template_file = resolved
    if model.python is not None:
        model.python = _resolve_python(ctx, (*here, "python"), model.python)


def _check_parsers(ctx: _Ctx, here: _KeyPath, model: ModelConfig) -> None:
    """An output parser this gateway does not know falls back to ``auto`` with a
    warning (mlx-openai-server configs name parsers of families not covered here)."""
    for key, choices in (
        ("tool_call_parser", TOOL_PARSER_CHOICES),
        ("reasoning_parser", REASONING_CHOICES),
    ):
        value = getattr(model, key)
        if value in choices:
            continue
        pos = ctx.positions.get((*here, key))
        line = f" (line {pos.key_line})" if pos else ""
        log.warning(
            "%s%s%s: %s %r is not one this gateway knows (%s); detecting it from the model",
            f"{ctx.file}: " if ctx.file else "",
            _display(here),
            line,
            key,
            value,
            ", ".join(choices),
        )
        setattr(model, key, "auto")


def _check_image(ctx: _Ctx, here: _KeyPath, model: ModelConfig) -> None:
    """The image settings: one scale per LoRA, local LoRA files, a valid ``size``."""
    if model.lora_scales and len(model.lora_scales) != len(model.lora_paths):
        raise ctx.error(
            (*here, "lora_scales"),
            f"{len(model.lora_scales)} scale(s) for {len(model.lora_paths)} LoRA path(s); "
            "give one scale per entry of lora_paths, or none (1.0 each)",
        )
    for j, path in enumerate(model.lora_paths):
        if _looks_local(ctx.base_dir, path):
            resolved = _absolute(ctx.base_dir, path)
            if not os.path.exists(resolved):
                raise ctx.error(
                    (*here, "lora_paths", j),
                    f"LoRA file {resolved!r} does not exist; fix the path (relative paths "
                    "start from the config file's folder) or give a Hugging Face repo id",
                )
            model.lora_paths[j] = resolved
    width, _, height = model.size.partition("x")
    if not (width.isdigit() and height.isdigit() and int(width) > 0 and int(height) > 0):
        raise ctx.error(
            (*here, "size"), f"expected 'WIDTHxHEIGHT' such as '1024x1024', got {_show(model.size)}"
        )
    width, height = int(width), int(height)
    if width % IMAGE_SIZE_MULTIPLE or height % IMAGE_SIZE_MULTIPLE:
        raise ctx.error(
            (*here, "size"),
            f"{model.size!r}: width and height must be multiples of {IMAGE_SIZE_MULTIPLE}",
        )
    if width * height > model.max_output_pixels:
        raise ctx.error(
            (*here, "size"),
            f"{model.size!r} is more than max_output_pixels ({model.max_output_pixels})",
        )


def _resolve_python(ctx: _Ctx, path: _KeyPath, value: str) -> str:
    if os.sep in value or value.startswith((".", "~")):
        resolved = _absolute(ctx.base_dir, value)
        if not (os.path.isfile(resolved) and os.access(resolved, os.X_OK)):
            raise ctx.error(
                path,
                f"interpreter {resolved!r} does not exist or is not executable; point it at "
                "a virtualenv's bin/python",
            )
        return resolved
    found = shutil.which(value)
    if found is None:
        raise ctx.error(
            path,
            f"interpreter {value!r} is not on PATH; give its full path (e.g. .venv/bin/python)",
        )
    return os.path.abspath(found)


# --------------------------------------------------------------------------- public


def _build(ctx: _Ctx, raw: Any) -> GatewayConfig:
    config = _convert(ctx, _normalize(ctx, raw), GatewayConfig)
    _check(ctx, config)
    return config


def load_config(path: str | Path) -> GatewayConfig:
    """Read and validate a YAML config file.

    Accepts our own keys and those of cubist38/mlx-openai-server multi-model files.
    Relative paths in the file (``model_path``, ``chat_template_file``, ``python``,
    ``runtime_dir``) resolve against the file's folder and are stored absolute.

    Raises:
        ConfigError: the file is missing, unreadable, not YAML, or not a valid config.
    """
    file = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"config file {file!r} not found", file=file) from None
    except IsADirectoryError:
        raise ConfigError(f"config file {file!r} is a directory", file=file) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {file!r}: {exc}", file=file) from None
    data, positions = _parse_yaml(text, file)
    return _build(_Ctx(file, Path(path).absolute().parent, positions), data)


def config_from_model_path(
    model_path: str | Path,
    model_type: str = "lm",
    served_model_name: str | None = None,
    *,
    model_options: Mapping[str, Any] | None = None,
    **server_overrides: Any,
) -> GatewayConfig:
    """A one-model config, as for ``mlx-gateway launch --model-path X``.

    ``server_overrides`` set :class:`ServerConfig` fields (``None`` values are skipped,
    so CLI options left out keep their defaults); ``model_options`` sets further
    :class:`ModelConfig` fields. A relative ``model_path`` resolves against the
    current directory. Validation is the same as for a file.

    Raises:
        ConfigError: a value is invalid (the message names the setting).
    """
    model: dict[str, Any] = {"model_path": str(model_path), "model_type": model_type}
    if served_model_name is not None:
        model["served_model_name"] = served_model_name
    model.update(model_options or {})
    server = {key: value for key, value in server_overrides.items() if value is not None}
    return _build(_Ctx(None, Path.cwd(), {}), {"server": server, "models": [model]})


def override_server(config: GatewayConfig, **overrides: Any) -> GatewayConfig:
    """``config`` with some server settings replaced, validated like the file's.

    For command-line options such as ``--port`` given with ``--config``; ``None``
    values are skipped. Returns a new :class:`GatewayConfig` sharing the models.

    Raises:
        ConfigError: an unknown setting or an invalid value (the message names it).
    """
    ctx = _Ctx(None, Path.cwd(), {})
    given = {key: value for key, value in overrides.items() if value is not None}
    for key in given:
        if key not in _SERVER_KEYS:
            raise ctx.unknown_key(("server",), key, _SERVER_KEYS)
    changed = _normalize_server(ctx, [(("server", key), value) for key, value in given.items()])
    fields = {**msgspec.structs.asdict(config.server), **changed}
    server = _convert(ctx, fields, ServerConfig, at=("server",))
    return msgspec.structs.replace(config, server=server)
