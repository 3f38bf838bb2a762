"""The settings every model entry has, whatever its kind: its names and path, its
lifetime, its queue, its memory and its worker's environment.

Each kind's own settings are a subclass of :class:`ModelConfig`, declared in
``config/kinds/<kind>.py`` and tagged with its ``model_type`` (msgspec's tagged
union, :mod:`.kinds`): a key of another kind is an unknown field of the entry's
Struct, refused by the schema itself.

The read-only properties below are the questions the gateway asks of any entry
(how long its context is, whether its KV cache is quantized, whether it is
sharded); a kind that has the setting declares it as a field of the same name, and
every other kind answers "not set". No I/O and no MLX here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec

from mlx_gateway.protocol.kinds import MODEL_TYPES
from mlx_gateway.supervisor.config.distributed import DistributedConfig

if TYPE_CHECKING:
    from mlx_gateway.supervisor.config.context import _Ctx
    from mlx_gateway.supervisor.config.server import ServerConfig
    from mlx_gateway.supervisor.config.yaml_positions import _KeyPath

Positive = Annotated[int, msgspec.Meta(ge=1)]
Seconds = Annotated[float, msgspec.Meta(ge=0)]
PositiveSeconds = Annotated[float, msgspec.Meta(gt=0)]
PositiveMiB = Annotated[float, msgspec.Meta(gt=0)]


class ModelConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, tag_field="model_type"):
    """One served model (an entry of ``models:``); only its kind's subclasses are
    built (:func:`.kinds.model_entry` makes one by ``model_type``).

    After :func:`load_config`, ``served_model_name`` is set and local paths are
    absolute.
    """

    model_path: str
    """A Hugging Face repo id (``org/name``) or a local model directory."""
    served_model_name: str = ""
    """The name clients send as ``model``; empty means ``model_path``."""
    aliases: list[str] = []
    on_demand: bool = True
    """``True``: started by the first request; ``False``: started with the gateway."""
    idle_timeout: Seconds = 300.0
    """Seconds without requests before the worker is stopped; 0 = never."""
    start_timeout: PositiveSeconds | None = None
    """Overrides ``server.start_timeout`` for this model."""
    pinned: bool = False
    """Never evicted to make room for another model."""
    group: str | None = None
    """Models sharing a group never run at the same time (one evicts the other)."""
    max_concurrency: Positive = 8
    max_queue: Annotated[int, msgspec.Meta(ge=0)] = 64
    """Requests that may wait in the gateway beyond ``max_concurrency`` → else 429."""
    queue_timeout: PositiveSeconds | None = None
    """Overrides ``server.queue_timeout`` for this model."""
    memory_estimate: str | int | None = None
    """This model's memory need (``6GB``) before its worker measured it; default:
    weights on disk times a factor per kind + the KV cache allowance."""
    preload_openblas: bool | None = None
    """Overrides ``server.preload_openblas`` for this model's worker."""
    python: str | None = None
    """Interpreter for this model's worker (a backend in its own virtualenv)."""
    worker_env: dict[str, str] = {}
    """Extra environment variables for this model's worker."""
    source: str = "config"
    """Where the entry comes from (set by the gateway, not a key of the file):
    ``config`` (the file, the command line), ``hub_cache`` (``serve_hub_cache``),
    ``pulled`` (``/api/pull``), ``ollama`` (``serve_ollama_library``),
    ``lmstudio`` (``serve_lmstudio_library``); listed by ``/v1/models``."""

    def __post_init__(self) -> None:
        if not self.served_model_name:
            self.served_model_name = self.model_path

    # ----------------------------------------------------------------- the kind

    @property
    def model_type(self) -> str:
        """The entry's ``model_type``: the tag of its Struct."""
        return str(self.__struct_config__.tag)

    @property
    def worker_kind(self) -> str:
        """The worker kind that serves this ``model_type`` (``multimodal`` → ``vlm``)."""
        try:
            return MODEL_TYPES[self.model_type]
        except KeyError:
            raise ValueError(f"unknown model_type {self.model_type!r}") from None

    @property
    def names(self) -> tuple[str, ...]:
        """Every name that routes to this model: the served name, then the aliases."""
        return (self.served_model_name, *self.aliases)

    # ------------------------------------- what kinds without the setting answer

    @property
    def context_length(self) -> int | Literal["auto"] | None:
        return None

    @property
    def chat_template_file(self) -> str | None:
        return None

    @property
    def trust_remote_code(self) -> bool:
        return False

    @property
    def prefill_batch_size(self) -> int:
        return 8

    @property
    def prefill_step_size(self) -> int:
        return 2048

    @property
    def kv_bits(self) -> int | None:
        return None

    @property
    def kv_group_size(self) -> int:
        return 64

    @property
    def max_kv_size(self) -> int | None:
        return None

    @property
    def prompt_cache_bytes(self) -> str | int:
        return 0

    @property
    def draft_model_path(self) -> str | None:
        return None

    @property
    def distributed(self) -> DistributedConfig | None:
        """A language model's ``DistributedConfig``; ``None`` for every other kind."""
        return None

    @property
    def fixed_context_length(self) -> int | None:
        """``context_length`` when it is a number (``auto`` is decided at each start)."""
        length = self.context_length
        return None if length == "auto" else length

    # ------------------------------------------------------- what kinds add

    def check(self, ctx: _Ctx, here: _KeyPath) -> None:
        """What types cannot express about this entry (paths that must exist, values
        that must agree); raises ``ctx.error(...)``. Kinds extend it."""
        from mlx_gateway.supervisor.config.paths import model_folder, resolve_python
        from mlx_gateway.supervisor.config.sizes import parse_size

        self.model_path = model_folder(ctx, (*here, "model_path"), self.model_path, "model")
        if self.python is not None:
            self.python = resolve_python(ctx, (*here, "python"), self.python)
        if self.memory_estimate is not None:
            try:
                parse_size(self.memory_estimate)
            except ValueError as exc:
                raise ctx.error((*here, "memory_estimate"), str(exc)) from None

    def worker_options(self) -> dict[str, Any]:
        """The kind's settings for ``WorkerSpec.options``; unset ones are left out,
        so the worker applies its own defaults."""
        return {}

    def start_options(self, server: ServerConfig, adapters: dict[str, str]) -> dict[str, Any]:
        """What the worker is told at each start beyond its entry (``adapters``: the
        LoRA adapters mounted now, id → folder)."""
        return {}

    def effective_start_timeout(self, server: ServerConfig) -> float:
        """This model's start timeout, falling back to the server's."""
        return self.start_timeout if self.start_timeout is not None else server.start_timeout

    def effective_queue_timeout(self, server: ServerConfig) -> float:
        """This model's queue timeout, falling back to the server's."""
        return self.queue_timeout if self.queue_timeout is not None else server.queue_timeout
