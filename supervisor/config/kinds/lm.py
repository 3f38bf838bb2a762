"""Language models (``model_type: lm``, mlx-lm): their settings beyond the text
models' (:mod:`..text`), their checks, and what their worker is told.

No I/O and no MLX here: the gateway imports it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from mlx_gateway.supervisor.config.distributed import DistributedConfig
from mlx_gateway.supervisor.config.entry import Positive
from mlx_gateway.supervisor.config.sizes import parse_size
from mlx_gateway.supervisor.config.text import TextModelConfig

if TYPE_CHECKING:
    from mlx_gateway.supervisor.config.context import _Ctx
    from mlx_gateway.supervisor.config.server import ServerConfig
    from mlx_gateway.supervisor.config.yaml_positions import _KeyPath

log = logging.getLogger("mlx_gateway.supervisor.config")

DEFAULT_ADAPTER = "default"
"""The id ``adapter_path`` mounts its adapter under (mlx_lm.server's one adapter)."""
ADAPTER_NONE = "none"
"""The ``adapter`` value that asks for the base model."""


class LmConfig(TextModelConfig, kw_only=True, tag="lm"):
    """A language model (mlx-lm): chat, completions, structured output, adapters."""

    max_kv_size: Annotated[int, msgspec.Meta(ge=16)] | None = None
    """Keep at most this many tokens of KV cache per sequence (a rotating window:
    older tokens are dropped)."""
    prompt_cache_bytes: str | int = "512MiB"
    """Bytes of KV cache kept after requests end, to reuse the longest common token
    prefix of later prompts (``512MiB``, ``2GB``; 0: off)."""
    prompt_cache_entries: Annotated[int, msgspec.Meta(ge=0)] = 32
    """Most KV caches kept in the prompt cache (0: off)."""
    prompt_cache_dir: str | None = None
    """Overrides ``server.prompt_cache_dir`` for this model."""
    prompt_cache_disk_bytes: str | int | None = None
    """Most bytes of this model's files in the disk tier (default:
    ``server.prompt_cache_disk_bytes``)."""
    adapters: dict[str, str] = {}
    """LoRA adapters (id → folder written by ``mlx_lm.lora``) a request may pick
    with its ``adapter`` field; more can be mounted at run time."""
    adapter_path: str | None = None
    """An adapter mounted as ``default`` and applied to requests that name none
    (mlx_lm.server's ``--adapter-path``)."""
    draft_model_path: str | None = None
    """A small model with the same tokenizer (a folder or a hub id) that proposes
    tokens for the model to check in one pass (speculative decoding of requests that
    run alone)."""
    num_draft_tokens: Positive = 3
    """With ``draft_model_path``: tokens the draft proposes a round."""
    distributed: DistributedConfig | None = None
    """Shard the model over several ranks started by ``mlx.launch``."""
    batch_slice_linger: Annotated[float, msgspec.Meta(ge=0, le=600)] = 0.0
    """Seconds after a person's answer on this model ends during which a batch
    prompt's prefill slices stay bounded (about one pass over the weights), so the
    next person's first token waits for at most one such slice; 0: back to efficient
    slices at once (a batch prompt reads fastest)."""

    def check(self, ctx: _Ctx, here: _KeyPath) -> None:
        super().check(ctx, here)
        self._check_sizes(ctx, here)
        self._check_kv(ctx, here)
        self._check_draft(ctx, here)
        self._check_adapters(ctx, here)
        self._check_distributed(ctx, here)

    def _check_sizes(self, ctx: _Ctx, here: _KeyPath) -> None:
        try:
            if parse_size(self.prompt_cache_bytes) < 0:
                raise ValueError(f"expected a size ≥ 0, got {self.prompt_cache_bytes!r}")
        except ValueError as exc:
            raise ctx.error((*here, "prompt_cache_bytes"), str(exc)) from None
        if self.prompt_cache_disk_bytes is not None:
            try:
                parse_size(self.prompt_cache_disk_bytes)
            except ValueError as exc:
                raise ctx.error((*here, "prompt_cache_disk_bytes"), str(exc)) from None

    def _check_kv(self, ctx: _Ctx, here: _KeyPath) -> None:
        if self.max_kv_size is not None and self.kv_bits is not None:
            raise ctx.error(
                (*here, "kv_bits"),
                "kv_bits and max_kv_size together: mlx-lm quantizes only unbounded caches; "
                "keep one of them",
            )

    def _check_draft(self, ctx: _Ctx, here: _KeyPath) -> None:
        """A draft model on a plain KV cache, in one process; a local draft folder
        must exist."""
        from mlx_gateway.supervisor.config.context import _display
        from mlx_gateway.supervisor.config.paths import model_folder

        if self.draft_model_path is None:
            if (*here, "num_draft_tokens") in ctx.origin:
                log.warning(
                    "%s: num_draft_tokens without draft_model_path does nothing", _display(here)
                )
            return
        path = (*here, "draft_model_path")
        for key in ("kv_bits", "max_kv_size", "distributed"):
            if getattr(self, key) is not None:
                raise ctx.error(
                    path,
                    f"draft_model_path and {key} together: speculative decoding needs a plain "
                    f"KV cache in one process; keep one of them",
                )
        self.draft_model_path = model_folder(ctx, path, self.draft_model_path, "draft model")

    def _check_adapters(self, ctx: _Ctx, here: _KeyPath) -> None:
        """Valid ids, existing mlx-lm adapter folders (relative paths from the config
        file's folder)."""
        from mlx_gateway.supervisor.config.paths import _absolute

        entries: list[tuple[_KeyPath, str | None, str]] = [
            ((*here, "adapters", adapter_id), adapter_id, path)
            for adapter_id, path in self.adapters.items()
        ]
        if self.adapter_path is not None:
            entries.append(((*here, "adapter_path"), None, self.adapter_path))
        if not entries:
            return
        if self.distributed is not None:
            raise ctx.error(
                entries[0][0],
                "LoRA adapters and distributed together: a sharded model's layers take no "
                "adapter here; keep one of them",
            )
        if self.adapter_path is not None and DEFAULT_ADAPTER in self.adapters:
            raise ctx.error(
                (*here, "adapter_path"),
                f"adapter_path mounts its adapter as {DEFAULT_ADAPTER!r}, and adapters has an "
                f"entry {DEFAULT_ADAPTER!r} too; rename that entry or drop adapter_path",
            )
        resolved: dict[str, str] = {}
        for path, adapter_id, folder in entries:
            if adapter_id is not None and (why := adapter_id_problem(adapter_id)):
                raise ctx.error(path, f"{adapter_id!r} cannot be an adapter id: {why}")
            absolute = _absolute(ctx.base_dir, folder)
            if (why := adapter_folder_problem(absolute)) is not None:
                raise ctx.error(
                    path,
                    f"{why}; fix the path (relative paths start from the config file's folder)",
                )
            if adapter_id is None:
                self.adapter_path = absolute
            else:
                resolved[adapter_id] = absolute
        self.adapters = resolved

    def _check_distributed(self, ctx: _Ctx, here: _KeyPath) -> None:
        import os

        from mlx_gateway.supervisor.config.paths import _absolute

        spread = self.distributed
        if spread is None:
            return
        if len(spread.hosts) * spread.ranks_per_host < 2:
            raise ctx.error(
                (*here, "distributed", "hosts"),
                "a distributed model needs at least 2 ranks: list 2 or more hosts, or set "
                "ranks_per_host to 2 or more",
            )
        if spread.hostfile is not None:
            resolved = _absolute(ctx.base_dir, spread.hostfile)
            if not os.path.isfile(resolved):
                raise ctx.error(
                    (*here, "distributed", "hostfile"),
                    f"host file {resolved!r} does not exist; make one with "
                    "mlx.distributed_config (relative paths start from the config file's "
                    "folder)",
                )
            spread.hostfile = resolved

    def worker_options(self) -> dict[str, Any]:
        """The ``WorkerSpec.options`` of a language model (see ``workers/lm``)."""
        options: dict[str, Any] = {
            "prompt_cache_bytes": parse_size(self.prompt_cache_bytes),
            "prompt_cache_entries": self.prompt_cache_entries,
            "stream_interval": self.stream_interval,
            "batch_slice_linger": self.batch_slice_linger,
            **kv_options(self),
            **draft_options(self),
        }
        if self.distributed is not None:
            options["distributed"] = self.distributed.parallel
        return options

    def start_options(self, server: ServerConfig, adapters: dict[str, str]) -> dict[str, Any]:
        """The prompt cache's disk tier and the adapters mounted now."""
        options = disk_tier_options(self, server)
        if adapters:
            options["adapters"] = adapters
        return options


ENTRIES = (LmConfig,)
"""The Structs of this kind's ``model_type`` values (the kind table's order)."""


def adapter_id_problem(adapter_id: str) -> str | None:
    """Why ``adapter_id`` cannot name an adapter, or ``None`` when it can."""
    if not adapter_id or any(c.isspace() for c in adapter_id):
        return "an adapter id must be a non-empty word without spaces"
    if "+" in adapter_id:
        return "'+' stacks adapters in a request, so an adapter id cannot contain it"
    if adapter_id == ADAPTER_NONE:
        return "'none' asks for the base model, so it cannot be an adapter id"
    return None


def adapter_folder_problem(path: str) -> str | None:
    """Why the folder ``path`` is not an mlx-lm adapter, or ``None`` (reads no file)."""
    import os

    for name in ("adapter_config.json", "adapters.safetensors"):
        if not os.path.isfile(os.path.join(path, name)):
            return (
                f"{path!r} has no {name}: an adapter is the folder mlx_lm.lora writes "
                "(adapter_config.json and adapters.safetensors)"
            )
    return None


def draft_options(config: LmConfig) -> dict[str, Any]:
    """The draft model of speculative decoding (``workers/lm/speculative.py``), if any."""
    if config.draft_model_path is None:
        return {}
    return {
        "draft_model_path": config.draft_model_path,
        "num_draft_tokens": config.num_draft_tokens,
    }


def kv_options(config: LmConfig) -> dict[str, Any]:
    """The KV cache settings (``workers/common/kv.py``); unset ones are left out."""
    options: dict[str, Any] = dict(config.kv_options())
    if config.max_kv_size is not None:
        options["max_kv_size"] = config.max_kv_size
    return options


def disk_tier_options(config: LmConfig, server: ServerConfig) -> dict[str, Any]:
    """The prompt cache's disk tier (``workers/lm/disk_cache.py``): the directory, this
    model's byte cap and the whole directory's; nothing when no directory is set."""
    folder = config.prompt_cache_dir or server.prompt_cache_dir
    if not folder:
        return {}
    total = parse_size(server.prompt_cache_disk_bytes)
    own = config.prompt_cache_disk_bytes
    return {
        "prompt_cache_dir": folder,
        "prompt_cache_disk_bytes": total if own is None else min(parse_size(own), total),
        "prompt_cache_dir_bytes": total,
    }
