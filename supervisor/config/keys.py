"""Which keys the config accepts: our own, the ones of mlx-openai-server that we
rename or act on, and the ones we accept but do not use (a warning names them)."""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.config.context import _Ctx, _display, _suggest
from mlx_gateway.supervisor.config.errors import ConfigError
from mlx_gateway.supervisor.config.kinds import entry_keys
from mlx_gateway.supervisor.config.server import ServerConfig
from mlx_gateway.supervisor.config.yaml_positions import _KeyPath

# --------------------------------------------------------------------------- keys

_SERVER_KEYS = frozenset(ServerConfig.__struct_fields__)
_MODEL_KEYS = (entry_keys() - {"source"}) | {"model_type"}
"""Every key of some kind's entries (which kind takes which: :mod:`.kinds`), but
``source``, which the gateway sets on the entries it adds."""
_DURATION_KEYS = frozenset(
    {
        "start_timeout",
        "shutdown_grace",
        "idle_timeout",
        "queue_timeout",
        "hang_timeout",
        "step_timeout",
        "min_resident_seconds",
        "image_fetch_timeout",
        "max_video_seconds",
        "image_url_ttl",
        "response_store_ttl",
        "stream_keepalive",
        "peer_check_interval",
        "peer_timeout",
        "max_keep_alive",
        "default_keep_alive",
    }
)

# mlx-openai-server keys, both of its `server:` section and of its older "hub" files
# that put server keys at the top level.
_SERVER_RENAMES = {"model_load_timeout": "start_timeout"}
_SERVER_IGNORED = frozenset(
    {
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
    "queue_size": "max_queue",
}
# Keys handled one by one in _normalize_model.
_MODEL_SPECIAL = frozenset(
    {"model_id", "name", "version", "auto_unload_minutes", "disable_batching"}
)
# mlx-openai-server per-model keys accepted and ignored (with a warning) for now.
_MODEL_IGNORED = frozenset(
    {
        "lora_paths_str",
        "lora_scales_str",
        "disable_auto_resize",
        "enable_auto_tool_choice",
        "message_converter",
        "debug",
        "pipeline",
        "default_presence_penalty",
        "default_xtc_probability",
        "default_xtc_threshold",
        "default_seed",
        "default_repetition_context_size",
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


def unknown_key(ctx: _Ctx, section: _KeyPath, key: Any, accepted: frozenset[str]) -> ConfigError:
    """``unknown key 'temprature' in models[1] ('qwen') at config.yaml:12; did you mean…``."""
    pos = ctx.positions.get((*section, key))
    index = ctx.model_index(section)
    place = ""
    if section:
        place = f" in {_display(section)}"
        if index in ctx.labels:
            place += f" ({ctx.labels[index]!r})"
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
        f"unknown key '{name}'{place}{ctx.where(pos, key=True)}; {hint}",
        file=ctx.file,
        line=pos.key_line if pos else None,
        key=_display((*section, name)),
        model_index=index,
    )
