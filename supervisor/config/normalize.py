"""Raw YAML mapping → our schema's dict: renames, ignored keys, durations, names."""

from __future__ import annotations

import logging
from typing import Any

from mlx_gateway.protocol.kinds import DEFAULT_MODEL_TYPE, MODEL_TYPES
from mlx_gateway.supervisor.config.apps import normalize_keys
from mlx_gateway.supervisor.config.context import _Ctx, _display, _duration, _show, _suggest
from mlx_gateway.supervisor.config.errors import ConfigError
from mlx_gateway.supervisor.config.keys import (
    _DURATION_KEYS,
    _MODEL_ACCEPTED,
    _MODEL_IGNORED,
    _MODEL_RENAMES,
    _SERVER_ACCEPTED,
    _SERVER_IGNORED,
    _SERVER_RENAMES,
    _TOP_IGNORED,
    unknown_key,
)
from mlx_gateway.supervisor.config.paths import _absolute
from mlx_gateway.supervisor.config.tools_normalize import normalize_tools
from mlx_gateway.supervisor.config.yaml_positions import _KeyPath

log = logging.getLogger("mlx_gateway.supervisor.config")

# --------------------------------------------------------------------------- normalize

_SECTIONS = frozenset({"server", "models", "routes", "realtime", "tools"})
"""The top-level sections."""


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
        if key in _SECTIONS:
            continue
        if isinstance(key, str) and key.startswith("x-"):
            continue  # a place for YAML anchors, as in docker-compose files
        if key in _TOP_IGNORED:
            _warn_ignored(ctx, (), [key])
        elif isinstance(key, str) and key in _SERVER_ACCEPTED:
            # mlx-openai-server "hub" files put the server keys at the top level.
            server_sources.append(((key,), value))
        else:
            raise unknown_key(ctx, (), key, _SECTIONS | _SERVER_ACCEPTED)

    section = root.get("server")
    if section is not None and not isinstance(section, dict):
        raise ctx.error(("server",), f"expected a mapping of server settings, got {_show(section)}")
    for key, value in (section or {}).items():
        if not isinstance(key, str) or key not in _SERVER_ACCEPTED:
            raise unknown_key(ctx, ("server",), key, _SERVER_ACCEPTED)
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
    entries = [_normalize_model(ctx, i, m) for i, m in enumerate(models)]
    if "default_keep_alive" in server:  # the idle_timeout of entries that set none
        for i, entry in enumerate(entries):
            if "idle_timeout" not in entry:
                entry["idle_timeout"] = server["default_keep_alive"]
                ctx.track(("models", i, "idle_timeout"), ("server", "default_keep_alive"))
    out = {"server": server, "models": entries}
    if root.get("routes") is not None:  # checked as it is decoded, then in config/routes.py
        out["routes"] = root["routes"]
    if "realtime" in root:  # checked as it is decoded (config/realtime.py)
        out["realtime"] = root["realtime"]
    if "tools" in root:
        out["tools"] = normalize_tools(ctx, root["tools"])
    return out


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
        if field == "step_timeout" and value == "auto":
            value = None
        elif field in _DURATION_KEYS:
            value = _duration(ctx, ("server", field), value)
        elif field == "keys":
            value = normalize_keys(ctx, ("server", field), value)
        elif field == "log_level" and isinstance(value, str):
            value = value.strip().lower()
            value = "warning" if value == "warn" else value
        elif field in ("runtime_dir", "log_file", "log_path") and isinstance(value, str):
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
            raise unknown_key(ctx, here, key, _MODEL_ACCEPTED)
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

    _normalize_model_type(ctx, here, out)
    if unbatched:  # a switch: it wins over any batch size given beside it
        out["max_concurrency"] = 1
        ctx.track((*here, "max_concurrency"), (*here, "disable_batching"))
    _normalize_names(ctx, here, names, out)
    if ignored:
        _warn_ignored(ctx, here, ignored)
    return out


def _normalize_model_type(ctx: _Ctx, here: _KeyPath, out: dict[str, Any]) -> None:
    """The entry's ``model_type`` (which Struct it decodes as): a known one, or the
    default when none is given."""
    model_type = out.setdefault("model_type", DEFAULT_MODEL_TYPE)
    if not isinstance(model_type, str):
        raise ctx.error((*here, "model_type"), f"expected a string, got {_show(model_type)}")
    if model_type in MODEL_TYPES:
        return
    close = _suggest(str(model_type), list(MODEL_TYPES))
    raise ctx.error(
        (*here, "model_type"),
        f"unknown model_type {_show(model_type)}; allowed: {', '.join(MODEL_TYPES)}"
        + (f" (did you mean '{close}'?)" if close else ""),
    )


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
