"""``mlx-gateway usage``: what a running gateway's answered requests used, as a table.

Reads ``GET /v1/usage`` with the standard library, as ``mlx-gateway status`` reads
its models: ``--group-by`` (``key``, ``model``, ``kind``, ``day``), ``--start`` and
``--end`` (Unix seconds or ISO dates) and the filters are passed on as they are. The
key comes from ``--api-key``, ``$MLX_GATEWAY_API_KEY`` or the config (its first
admin key, which reads every app's usage, else its first client key).
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from mlx_gateway.supervisor.status import cli_target, default_url
from mlx_gateway.supervisor.usage.query import SUMS

HEADINGS = {
    "requests": "REQUESTS",
    "input_tokens": "INPUT",
    "cached_tokens": "CACHED",
    "output_tokens": "OUTPUT",
    "audio_seconds": "AUDIO S",
    "images": "IMAGES",
    "duration": "SECONDS",
    "errors": "ERRORS",
}
"""The column of each figure of :data:`...query.SUMS`, in its order."""
FIGURES = tuple(SUMS)


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("usage", help="show what a running gateway's requests used")
    parser.add_argument("--url", help="the gateway (default: from --config, else :8000)")
    parser.add_argument("--config", help="the gateway's YAML file: its host, port and keys")
    parser.add_argument("--api-key", help="a key (an admin key reads every app's usage)")
    parser.add_argument(
        "--group-by",
        default="key,model",
        help="key, model, kind, day, comma-separated (default: key,model; '' for one total)",
    )
    parser.add_argument("--start", help="from (Unix seconds or an ISO date; default: 30 days ago)")
    parser.add_argument("--end", help="until (Unix seconds or an ISO date, included)")
    parser.add_argument("--key", help="only this app's usage (by its name)")
    parser.add_argument("--model", help="only this model's usage")
    parser.add_argument("--kind", help="only this kind of request (chat, embeddings …)")
    parser.add_argument("--json", action="store_true", help="print the API's answer")


def fetch_usage(url: str, key: str | None, params: dict[str, str]) -> dict[str, Any]:
    """The answer of ``GET {url}/v1/usage?params``; raises :class:`RuntimeError`
    with the gateway's message."""
    query = urllib.parse.urlencode(params)
    request = urllib.request.Request(f"{url.rstrip('/')}/v1/usage?{query}")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body: dict[str, Any] = json.load(response)
            return body
    except urllib.error.HTTPError as exc:
        try:
            message = json.load(exc)["error"]["message"]
        except Exception:
            message = exc.reason
        raise RuntimeError(f"{url} answered {exc.code}: {message}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise RuntimeError(f"cannot reach the gateway at {url}: {exc}") from None


def table(body: dict[str, Any]) -> str:
    """The rows as aligned columns: the groups, then the figures."""
    groups = [str(g) for g in body.get("group_by", [])]
    header = [g.upper() for g in groups] + [HEADINGS[f] for f in FIGURES]
    lines = [header]
    for row in body.get("data", []):
        lines.append([str(row.get(g, "")) for g in groups] + [_figure(row, f) for f in FIGURES])
    if len(lines) == 1:
        return "no usage in this time range"
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _figure(row: dict[str, Any], name: str) -> str:
    value = row.get(name, 0)
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def run(args: Any) -> int:
    """0 when the gateway answered, 1 when not, 2 on a bad config."""
    if (target := cli_target(args, admin_first=True)) is None:
        return 2
    config, key = target
    params = {"group_by": args.group_by}
    for name in ("start", "end", "key", "model", "kind"):
        if (value := getattr(args, name)) is not None:
            params[name] = value
    try:
        body = fetch_usage(args.url or default_url(config), key, params)
    except RuntimeError as exc:
        print(f"mlx-gateway: usage: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(body, indent=2) if args.json else table(body))
    return 0
