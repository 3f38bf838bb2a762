"""Keys as apps (``server.keys``): who may call the gateway, with which models,
role, priority and limits.

Each entry names one app (a chat app, a coding agent, Home Assistant…) and gives its
key in exactly one way: inline (``key``), from an environment variable (``key_env``)
or from a file (``key_file``, its content without the surrounding whitespace). The
key is read once, when the config is loaded, and is never shown: not in errors, not
in logs, not in this Struct's ``repr``.
"""

from __future__ import annotations

import os
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from mlx_gateway.supervisor.config.context import _Ctx, _show, _suggest
from mlx_gateway.supervisor.config.paths import _absolute
from mlx_gateway.supervisor.config.yaml_positions import _KeyPath

_Name = Annotated[str, msgspec.Meta(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
_Limit = Annotated[int, msgspec.Meta(ge=1)]
KEY_SOURCES = ("key", "key_env", "key_file")


class KeyConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One app (an entry of ``server.keys``)."""

    name: _Name
    """The app's name in logs, usage and errors (letters, digits, ``.``, ``_``, ``-``)."""
    key: Annotated[str, msgspec.Meta(min_length=1, pattern=r"^\S+$")]
    """The key itself: given inline, or read from ``key_env`` / ``key_file`` at load."""
    key_env: str | None = None
    """The environment variable the key was read from, if any."""
    key_file: str | None = None
    """The file the key was read from (absolute), if any."""
    models: list[Annotated[str, msgspec.Meta(min_length=1)]] | None = None
    """Served names (or aliases) and globs (``qwen*``, ``*-embed``) this app may use;
    ``None``: every model. Any other model is a 404 to it, as if it did not exist."""
    tools: list[Annotated[str, msgspec.Meta(min_length=1)]] | None = None
    """The tools the gateway runs that this app may use: the labels of
    ``tools.mcp_servers``, ``web_search``, ``web_fetch`` and ``mcp_url`` (MCP servers a
    request names by URL), and globs of them; ``None``: every tool. Any other does not
    exist for it: naming it is the 400 of an unknown one, a model's ``server_tools``
    are narrowed to these for its requests."""
    role: Literal["client", "admin", "read-only"] = "client"
    """``client``: the API; ``admin``: the API and the admin endpoints; ``read-only``:
    list and show models only (generating is a 403)."""
    priority: Literal["interactive", "batch"] = "interactive"
    """How the scheduler ranks this app's requests against others'."""
    requests_per_minute: _Limit | None = None
    """Generating requests this app may start in any 60 seconds."""
    tokens_per_minute: _Limit | None = None
    """Tokens (prompt and output) this app's answers may use in any 60 seconds."""
    tokens_per_day: _Limit | None = None
    """Tokens this app's answers may use in any 24 hours."""
    max_concurrent: _Limit | None = None
    """Generating requests of this app in flight at once."""

    def __repr__(self) -> str:  # the key never shows
        return (
            f"KeyConfig(name={self.name!r}, role={self.role!r}, models={self.models!r}, "
            f"tools={self.tools!r})"
        )


BUILTIN_TOOLS = ("web_search", "web_fetch", "mcp_url")
"""The scope names of the tools a key's ``tools`` may list beside MCP server labels."""


def in_scope(patterns: tuple[str, ...] | list[str] | None, names: tuple[str, ...]) -> bool:
    """Whether a model known by ``names`` (its served name first, then its aliases)
    is within ``patterns`` (``None``: everything). Names compare exactly; a pattern
    with ``*``, ``?`` or ``[`` is a glob (case-sensitive)."""
    if patterns is None:
        return True
    return any(fnmatchcase(name, pattern) for pattern in patterns for name in names)


_ENTRY_KEYS = frozenset(KeyConfig.__struct_fields__)


def normalize_keys(ctx: _Ctx, here: _KeyPath, value: Any) -> Any:
    """``server.keys`` with each entry's key read (``key_env``, ``key_file``), so
    that msgspec finds ``key`` set; errors name the entry, the key and the line."""
    if not isinstance(value, list):
        raise ctx.error(here, f"expected a list of apps ('- name: ...'), got {_show(value)}")
    return [_normalize_entry(ctx, (*here, i), entry) for i, entry in enumerate(value)]


def _normalize_entry(ctx: _Ctx, here: _KeyPath, raw: Any) -> Any:
    if not isinstance(raw, dict):
        raise ctx.error(here, f"expected a mapping with a name and a key, got {_show(raw)}")
    label = f" {raw['name']!r}" if isinstance(raw.get("name"), str) else ""
    for key in raw:
        if key not in _ENTRY_KEYS:
            match = _suggest(str(key), _ENTRY_KEYS)
            hint = f"did you mean '{match}'?" if match else "see docs/configuration.md"
            raise ctx.error(
                (*here, key), f"unknown key {_show(key)} in app{label}; {hint}", key=True
            )
    if "name" not in raw:
        raise ctx.error(here, "missing 'name': the app's name in logs and usage")
    given = [k for k in KEY_SOURCES if raw.get(k) is not None]
    if len(given) != 1:
        what = "none" if not given else " and ".join(given)
        raise ctx.error(
            here,
            f"app{label} needs exactly one of key, key_env or key_file (got {what})",
        )
    out = dict(raw)
    source = given[0]
    if source == "key_env":
        out["key"] = _from_env(ctx, (*here, source), raw[source], label)
    elif source == "key_file":
        path = _from_path(ctx, (*here, source), raw[source])
        out["key_file"] = path
        out["key"] = _from_file(ctx, (*here, source), path, label)
    elif not isinstance(raw["key"], str):
        raise ctx.error((*here, "key"), f"app{label}: expected a string; quote the key")
    for scoped in ("models", "tools"):  # one name: accept it without the list
        if isinstance(out.get(scoped), str):
            out[scoped] = [out[scoped]]
    return out


def _from_env(ctx: _Ctx, path: _KeyPath, name: Any, label: str) -> str:
    if not isinstance(name, str) or not name:
        raise ctx.error(path, f"expected an environment variable's name, got {_show(name)}")
    value = os.environ.get(name, "").strip()
    if not value:
        raise ctx.error(
            path, f"app{label}: the environment variable {name} is not set or empty; export it"
        )
    return value


def _from_path(ctx: _Ctx, path: _KeyPath, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ctx.error(path, f"expected a file path, got {_show(value)}")
    return _absolute(ctx.base_dir, value)


def _from_file(ctx: _Ctx, path: _KeyPath, file: str, label: str) -> str:
    try:
        value = Path(file).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        problem = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ctx.error(path, f"app{label}: cannot read the key file {file}: {problem}") from None
    if not value:
        raise ctx.error(path, f"app{label}: the key file {file} is empty")
    if any(c.isspace() for c in value):
        raise ctx.error(path, f"app{label}: the key in {file} has whitespace inside it")
    return value
