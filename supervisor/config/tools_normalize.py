"""The raw ``tools:`` section → our schema's dict, key by key (so that an error names
the key and its line), with the servers of ``tools.mcp_config`` (a Claude or Cursor
``mcp.json``) read and merged in."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from mlx_gateway.supervisor.config.context import _Ctx, _display, _duration, _show
from mlx_gateway.supervisor.config.convert import _convert
from mlx_gateway.supervisor.config.errors import ConfigError
from mlx_gateway.supervisor.config.keys import unknown_key
from mlx_gateway.supervisor.config.paths import _absolute
from mlx_gateway.supervisor.config.tools import (
    FetchConfig,
    McpServerConfig,
    ToolsConfig,
    WebSearchConfig,
)
from mlx_gateway.supervisor.config.yaml_positions import _KeyPath, _parse_yaml, _Pos

log = logging.getLogger("mlx_gateway.supervisor.config")

_TOOLS_KEYS = frozenset(ToolsConfig.__struct_fields__)
_SUBSECTIONS: dict[str, frozenset[str]] = {
    "web_search": frozenset(WebSearchConfig.__struct_fields__),
    "fetch": frozenset(FetchConfig.__struct_fields__),
}
_TRANSPORT_KEYS = ("type", "transport")
"""What ``mcp.json`` files name the transport with; the shape says it already."""
_ENTRY_IGNORED = frozenset({"autoApprove", "alwaysAllow"})
"""Keys of Cline's and Roo's entries about their own approval prompts."""
_ENTRY_KEYS = frozenset(McpServerConfig.__struct_fields__) | {*_TRANSPORT_KEYS, *_ENTRY_IGNORED}
_STDIO_ONLY = ("args", "env", "cwd")
_HTTP_ONLY = ("headers",)
_URL = re.compile(r"^https?://[^\s/]+")
_TRANSPORTS = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamable_http": "http",
    "streamableHttp": "http",
}


def normalize_tools(ctx: _Ctx, raw: Any) -> dict[str, Any]:
    """The ``tools:`` section ready for msgspec: unknown keys refused, durations in
    seconds, each MCP server's shape checked, ``mcp_config``'s servers merged under
    those of ``mcp_servers``, disabled servers left out."""
    here: _KeyPath = ("tools",)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ctx.error(here, f"expected a mapping of tool settings, got {_show(raw)}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or key not in _TOOLS_KEYS:
            raise unknown_key(ctx, here, key, _TOOLS_KEYS)
        if value is None:  # `key:` with nothing after it: keep the default
            continue
        path = (*here, key)
        if key in ("mcp_idle_timeout", "mcp_timeout"):
            value = _duration(ctx, path, value)
        elif key in _SUBSECTIONS:
            value = _subsection(ctx, path, value, _SUBSECTIONS[key])
        elif key == "mcp_servers":
            value = _servers(ctx, path, value)
        elif key == "mcp_config" and isinstance(value, str):
            value = _absolute(ctx.base_dir, value.strip())
        out[key] = value
    if isinstance(out.get("mcp_config"), str):
        read = read_mcp_config(ctx, (*here, "mcp_config"), out["mcp_config"])
        out["mcp_servers"] = {**read, **out.get("mcp_servers", {})}
    if "mcp_servers" in out:
        out["mcp_servers"] = {
            label: entry for label, entry in out["mcp_servers"].items() if not entry.get("disabled")
        }
    return out


def _subsection(ctx: _Ctx, path: _KeyPath, raw: Any, accepted: frozenset[str]) -> Any:
    if not isinstance(raw, dict):
        raise ctx.error(path, f"expected a mapping, got {_show(raw)}")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or key not in accepted:
            raise unknown_key(ctx, path, key, accepted)
        if value is None:
            continue
        if key == "timeout":
            value = _duration(ctx, (*path, key), value)
        elif key.endswith("url"):
            _check_url(ctx, (*path, key), value)
        out[key] = value
    return out


def _servers(ctx: _Ctx, path: _KeyPath, raw: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(raw, dict):
        raise ctx.error(
            path,
            f"expected a mapping of label: server (as the mcpServers of an mcp.json), "
            f"got {_show(raw)}",
        )
    servers: dict[str, dict[str, Any]] = {}
    for label, entry in raw.items():
        if not isinstance(label, str) or not label.strip():
            raise ctx.error((*path, label), f"{_show(label)} cannot be a server label", key=True)
        servers[label] = server_entry(ctx, (*path, label), entry)
        # types and ranges now, with this entry's lines (msgspec's error path names no
        # mapping key: it would not say which server)
        _convert(ctx, servers[label], McpServerConfig, at=(*path, label))
    return servers


def server_entry(ctx: _Ctx, here: _KeyPath, raw: Any) -> dict[str, Any]:
    """One server's entry, its shape checked: ``{command, args, env, cwd}`` or ``{url,
    headers}`` (and ``timeout``, ``disabled``); a ``type``/``transport`` key must agree
    with the shape and is dropped; SSE is refused."""
    if not isinstance(raw, dict):
        raise ctx.error(
            here,
            "expected a mapping: {command, args, env} for a stdio server or {url, headers} "
            f"for a streamable HTTP server, got {_show(raw)}",
        )
    out: dict[str, Any] = {}
    said: tuple[str, str] | None = None  # (key, transport) of a type/transport key
    ignored: list[str] = []
    for key, value in raw.items():
        if not isinstance(key, str) or key not in _ENTRY_KEYS:
            raise unknown_key(ctx, here, key, _ENTRY_KEYS - _ENTRY_IGNORED)
        if key in _ENTRY_IGNORED:
            ignored.append(key)
        elif key in _TRANSPORT_KEYS:
            said = (key, _transport(ctx, (*here, key), value))
        elif value is None:
            continue
        elif key == "timeout":
            out[key] = _duration(ctx, (*here, key), value)
        elif key in ("env", "headers"):
            out[key] = _strings(ctx, (*here, key), value)
        elif key == "cwd" and isinstance(value, str):
            out[key] = _absolute(ctx.base_dir, value)
        elif key == "url":
            out[key] = _check_url(ctx, (*here, key), value)
        else:
            out[key] = value
    if ignored:
        log.info(
            "%s%s: %s ignored (the gateway asks no approval of config servers)",
            f"{ctx.file}: " if ctx.file else "",
            _display(here),
            ", ".join(ignored),
        )
    _check_shape(ctx, here, out, said)
    return out


def _check_shape(
    ctx: _Ctx, here: _KeyPath, entry: dict[str, Any], said: tuple[str, str] | None
) -> None:
    if "command" in entry and "url" in entry:
        raise ctx.error(
            (*here, "url"),
            "give command (a stdio server) or url (a streamable HTTP server), not both",
            key=True,
        )
    if "command" not in entry and "url" not in entry:
        raise ctx.error(
            here,
            "missing 'command' (a server run over stdio) or 'url' (a streamable HTTP server)",
        )
    transport = "stdio" if "command" in entry else "http"
    if said is not None and said[1] != transport:
        key, named = said
        given = "command" if transport == "stdio" else "url"
        raise ctx.error(
            (*here, key),
            f"{key}: {named} does not match the entry's {given}; a stdio server gives "
            "command, a streamable HTTP server url",
        )
    wrong = _HTTP_ONLY if transport == "stdio" else _STDIO_ONLY
    for key in wrong:
        if key in entry:
            other = "runs a command (stdio)" if transport == "stdio" else "is reached by url"
            raise ctx.error(
                (*here, key),
                f"{key} applies to "
                + ("a server given by url" if key in _HTTP_ONLY else "a server run by command")
                + f"; this one {other}",
                key=True,
            )


def _check_url(ctx: _Ctx, path: _KeyPath, value: Any) -> Any:
    if isinstance(value, str) and _URL.match(value) is None:
        raise ctx.error(path, f"expected an http:// or https:// URL, got {_show(value)}")
    return value


def _transport(ctx: _Ctx, path: _KeyPath, value: Any) -> str:
    if isinstance(value, str) and value.lower() == "sse":
        raise ctx.error(
            path,
            "the SSE transport (deprecated by MCP) is not supported; give the server's "
            "streamable HTTP endpoint as url (usually ending in /mcp) and leave out "
            f"{path[-1]} or write {path[-1]}: http",
        )
    if not isinstance(value, str) or value not in _TRANSPORTS:
        raise ctx.error(
            path,
            f"unknown transport {_show(value)}; use one of: {', '.join(_TRANSPORTS)} "
            "(or leave it out: command means stdio, url streamable HTTP)",
        )
    return _TRANSPORTS[value]


def _strings(ctx: _Ctx, path: _KeyPath, value: Any) -> dict[str, str]:
    """``NAME: value`` pairs (environment variables, headers) as strings."""
    if not isinstance(value, dict):
        raise ctx.error(path, f"expected a mapping of NAME: value, got {_show(value)}")
    out: dict[str, str] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not name or "=" in name:
            raise ctx.error((*path, name), f"{_show(name)} is not a valid name", key=True)
        if isinstance(item, bool) or item is None or not isinstance(item, str | int | float):
            raise ctx.error(
                (*path, name),
                f'expected a string, got {_show(item)}; quote the value, e.g. {name}: "1"',
            )
        out[name] = str(item)
    return out


# --------------------------------------------------------------------------- mcp.json


def read_mcp_config(ctx: _Ctx, key: _KeyPath, file: str) -> dict[str, dict[str, Any]]:
    """The servers of a Claude or Cursor ``mcp.json`` (its ``mcpServers``), each
    checked as an entry of ``tools.mcp_servers``; errors name that file and its line."""
    try:
        text = Path(file).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ctx.error(key, f"MCP config file {file!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ctx.error(key, f"cannot read MCP config file {file!r}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{file}:{exc.lineno}: not valid JSON: {exc.msg} (column {exc.colno})",
            file=file,
            line=exc.lineno,
        ) from None
    jctx = _Ctx(file, Path(file).parent, _json_positions(text, file))
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise ConfigError(
            f'{file}: expected a JSON object with an "mcpServers" object of label: server '
            "(as Claude's and Cursor's mcp.json)",
            file=file,
            line=1,
        )
    return _servers(jctx, ("mcpServers",), data["mcpServers"])


def _json_positions(text: str, file: str) -> dict[_KeyPath, _Pos]:
    """The line of each key of a JSON file (read as YAML, of which JSON is nearly a
    subset); none where YAML refuses it (tabs before a key)."""
    try:
        return _parse_yaml(text, file)[1]
    except ConfigError:
        return {}
