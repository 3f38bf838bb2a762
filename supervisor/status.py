"""``mlx-gateway status``: a running gateway's models as a table.

Reads ``GET /v1/models`` with the standard library (no HTTP client dependency in
the gateway), and prints one row per model: name, state (with load progress),
pid, in flight, waiting, memory (what the worker reports), need (what the memory
budget counts, and whether it was measured, configured or estimated), whether a
load would fit now (and which idle models it would evict), last used
and the last error's first line; then the budget, what is reserved and what is free;
then the requests running now (``GET /v1/requests``, where the key may read it).
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any

from mlx_gateway.supervisor.config import GatewayConfig

COLUMNS = (
    "MODEL",
    "STATE",
    "PID",
    "INFLIGHT",
    "WAITING",
    "MEMORY",
    "NEED",
    "FIT",
    "LAST USED",
    "ERROR",
)
ERROR_WIDTH = 60


class StatusError(Exception):
    """The gateway could not be asked; the message says why."""


def default_url(config: GatewayConfig | None) -> str:
    """The gateway's base URL from its config (a wildcard bind is asked on loopback)."""
    if config is None:
        return "http://127.0.0.1:8000"
    host = config.server.host
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{config.server.port}"


def fetch_models(url: str, key: str | None = None, timeout: float = 5.0) -> list[dict[str, Any]]:
    """The ``data`` of ``GET {url}/v1/models``."""
    return fetch_listing(url, key, timeout)[0]


def fetch_listing(
    url: str, key: str | None = None, timeout: float = 5.0
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The ``data`` and the ``memory`` summary of ``GET {url}/v1/models``."""
    request = urllib.request.Request(url.rstrip("/") + "/v1/models")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = json.load(response)
    except urllib.error.HTTPError as exc:
        raise StatusError(f"{url} answered {exc.code}: {_error_message(exc)}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StatusError(f"cannot reach the gateway at {url}: {reason}") from None
    except ValueError as exc:
        raise StatusError(f"{url}/v1/models did not answer JSON: {exc}") from None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise StatusError(f"{url}/v1/models did not answer a model list")
    memory = body.get("memory")
    entries = [entry for entry in data if isinstance(entry, dict)]
    return entries, memory if isinstance(memory, dict) else None


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.load(exc)["error"]["message"])
    except Exception:
        return exc.reason or "error"


def human_bytes(value: Any) -> str:
    """``1.5 GiB``; ``-`` when unknown. A dict of figures shows its ``rss``."""
    if isinstance(value, Mapping):
        value = value.get("rss") or value.get("total")
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def ago(timestamp: Any, now: float) -> str:
    """``12s ago``, ``5m ago``, ``3h ago``, ``2d ago``; ``-`` for never."""
    if not isinstance(timestamp, int | float) or isinstance(timestamp, bool):
        return "-"
    seconds = max(0, int(now - timestamp))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


def _state(entry: Mapping[str, Any]) -> str:
    state = str(entry.get("state") or "-")
    progress = entry.get("progress")
    fraction = progress.get("fraction") if isinstance(progress, Mapping) else progress
    if state == "loading" and isinstance(fraction, int | float) and not isinstance(fraction, bool):
        state += f" {fraction * 100:.0f}%"
    return state


def _need(entry: Mapping[str, Any]) -> str:
    size = human_bytes(entry.get("memory_need"))
    source = entry.get("memory_need_source")
    return f"{size} ({source})" if size != "-" and source else size


def _fit(entry: Mapping[str, Any]) -> str:
    """Would a load fit now: ``loaded``, ``yes``, ``evicts a, b``, ``waits for a``,
    ``too big`` (``GET /v1/models/{id}/fit`` tells more); ``-`` when not known."""
    fit = entry.get("fit")
    if not isinstance(fit, Mapping):
        return "-"
    verdict = fit.get("verdict")
    if verdict == "evicts":
        return "evicts " + ", ".join(map(str, fit.get("evict") or ()))
    if verdict == "waits":
        return "waits for " + ", ".join(map(str, fit.get("blockers") or ()))
    words = {"resident": "loaded", "fits": "yes", "too_big": "too big"}
    return words.get(str(verdict), "-")


def budget_line(memory: Mapping[str, Any] | None) -> str:
    """``memory budget 24.0 GiB: 3.2 GiB reserved, 20.8 GiB free``; ``""`` when unknown."""
    if not memory:
        return ""
    free = memory.get("free")
    free_text = (
        f"{human_bytes(free)} free"
        if isinstance(free, int) and free > 0
        else f"over by {human_bytes(-free)}"
        if isinstance(free, int) and free < 0
        else "0 free"
    )
    return (
        f"memory budget {human_bytes(memory.get('budget'))}: "
        f"{human_bytes(memory.get('reserved'))} reserved, {free_text}"
    )


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def rows(models: Sequence[Mapping[str, Any]], now: float) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for entry in models:
        error = entry.get("error")
        error_line = str(error).strip().splitlines()[0] if error else ""
        if len(error_line) > ERROR_WIDTH:
            error_line = error_line[: ERROR_WIDTH - 1] + "…"
        out.append(
            (
                _cell(entry.get("id")),
                _state(entry),
                _cell(entry.get("pid")),
                _cell(entry.get("inflight", 0)),
                _cell(entry.get("waiting", 0)),
                human_bytes(entry.get("memory")),
                _need(entry),
                _fit(entry),
                ago(entry.get("last_used"), now),
                error_line or "-",
            )
        )
    return out


def table(models: Sequence[Mapping[str, Any]], now: float | None = None) -> str:
    """The models as an aligned text table with a header line."""
    body = rows(models, time.time() if now is None else now)
    widths = [max(len(row[i]) for row in (COLUMNS, *body)) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in (COLUMNS, *body)
    ]
    return "\n".join(lines)


def fetch_requests(url: str, key: str | None = None, timeout: float = 5.0) -> list[Any] | None:
    """The ``data`` of ``GET {url}/v1/requests``; ``None`` when it cannot be read
    (an admin endpoint: the key may not open it)."""
    request = urllib.request.Request(url.rstrip("/") + "/v1/requests")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data = json.load(response).get("data")
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return None
    return data if isinstance(data, list) else None


def requests_lines(running: list[Any]) -> list[str]:
    """``requests: 2 running`` and one line per request."""
    lines = [f"requests: {len(running)} running" if running else "requests: none running"]
    for r in running:
        tokens = f"{r.get('prompt_tokens', 0)} in, {r.get('completion_tokens', 0)} out"
        lines.append(
            f"  {r.get('id')}  {r.get('model') or '-'}  {r.get('path')}  {r.get('phase')}  "
            f"{float(r.get('age') or 0):.1f} s  {tokens}  from {r.get('client') or '-'}"
        )
    return lines


def add_parser(sub: Any) -> None:
    """Register ``status`` on the ``mlx-gateway`` subcommand parser ``sub``."""
    parser = sub.add_parser("status", help="show the models of a running gateway")
    parser.add_argument("--url", help="the gateway (default: from --config, else :8000)")
    parser.add_argument("--config", help="the gateway's YAML file: its host, port and keys")
    parser.add_argument("--api-key", help="a key, if the gateway needs one (else from --config)")
    parser.add_argument("--json", action="store_true", help="print the raw model list")


def cli_target(args: Any, *, admin_first: bool = False) -> tuple[Any, str | None] | None:
    """What a terminal command talks to: the config ``--config`` names (``None``
    without one) and the key to send (``--api-key``, else ``$MLX_GATEWAY_API_KEY``,
    else the config's first ``api_keys`` entry, its ``admin_keys`` before them with
    ``admin_first``); ``None``, the error printed, when the config does not load."""
    from mlx_gateway.supervisor.config import ConfigError, load_config

    config = None
    if args.config:
        try:
            config = load_config(args.config)
        except ConfigError as exc:
            print(f"mlx-gateway: configuration error: {exc}", file=sys.stderr)
            return None
    key = args.api_key or os.environ.get("MLX_GATEWAY_API_KEY")
    if key is None and config is not None:
        server = config.server
        keys = [*server.admin_keys, *server.api_keys] if admin_first else server.api_keys
        key = keys[0] if keys else None
    return config, key


def run(args: Any) -> int:
    """``mlx-gateway status``: 0 when the gateway answered, 1 when not, 2 on a bad config."""
    if (target := cli_target(args)) is None:
        return 2
    config, key = target
    url = args.url or default_url(config)
    try:
        models, memory = fetch_listing(url, key)
    except StatusError as exc:
        print(f"mlx-gateway: status: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(models, indent=2))
    else:
        print(table(models))
        if line := budget_line(memory):
            print(line)
        if (running := fetch_requests(url, key)) is not None:
            print("\n".join(requests_lines(running)))
    return 0
