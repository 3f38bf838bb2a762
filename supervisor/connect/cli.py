"""The ``connect`` command: its arguments, and what it prints."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from mlx_gateway.supervisor.connect import CLIENTS
from mlx_gateway.supervisor.connect.check import check
from mlx_gateway.supervisor.connect.files import ConnectError, Ledger, apply, read_text, undo
from mlx_gateway.supervisor.connect.target import resolve


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "connect",
        help="point a client (Claude Code, Codex, opencode, Continue, Open WebUI) at the gateway",
        description="Merge this gateway's URL, key and a model into a client's own config "
        "file, keeping its other settings and a backup of the original (--undo restores it).",
    )
    parser.add_argument("client", choices=sorted(CLIENTS), help="the client to configure")
    parser.add_argument("--config", help="the gateway's YAML file: its host, port and keys")
    parser.add_argument("--url", help="the gateway (default: from --config, else :8000)")
    parser.add_argument("--api-key", help="the key to give the client (default: from --config)")
    parser.add_argument(
        "--model",
        help="the model (default: of the chat models that fit in memory now, for a coding "
        "client the one whose context holds its first request, tool-capable and longest first; "
        "else the first)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="write the configuration even when no model's context holds the client's "
        "first request",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="after writing, ask the gateway for the model again and say whether its context "
        "holds the client's first request (exit 1 if not)",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--print", action="store_true", help="only show what would be written")
    mode.add_argument("--undo", action="store_true", help="restore the client's original file")


def run(args: Any, env: Mapping[str, str] | None = None) -> int:
    """0 when done, 1 when it could not be done (the reason on stderr; nothing
    written) or ``--check`` failed, 2 for a bad config."""
    from mlx_gateway.supervisor.config import ConfigError, load_config

    env = os.environ if env is None else env
    client = CLIENTS[args.client]
    ledger = Ledger(env)
    try:
        if args.undo:
            for line in undo(ledger, client.name):
                print(line)
            return 0
        config = None
        if args.config:
            try:
                config = load_config(args.config)
            except ConfigError as exc:
                print(f"mlx-gateway: configuration error: {exc}", file=sys.stderr)
                return 2
        key = args.api_key or env.get("MLX_GATEWAY_API_KEY")
        target = resolve(
            config, url=args.url, key=key, model=args.model, needs=client.needs, force=args.force
        )
        path = client.path(env)
        text = client.render(read_text(path), target, path)
        for note in target.notes:
            print(f"note: {note}", file=sys.stderr)
        if args.print:
            print(f"# would write {path}:")
            print(text, end="")
            return 0
        edit = apply(ledger, client.name, path, text)
    except ConnectError as exc:
        print(f"mlx-gateway: connect {client.name}: {exc}", file=sys.stderr)
        return 1
    kept = f" (the original is kept as {edit.backup})" if edit.existed else ""
    print(f"wrote {path}{kept}")
    print(client.usage(target).replace("<file>", str(path)))
    print(f"undo with: mlx-gateway connect {client.name} --undo")
    if args.check:
        ok, line = check(target)
        print(line, file=sys.stdout if ok else sys.stderr)
        return 0 if ok else 1
    return 0
