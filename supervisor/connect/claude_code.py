"""Claude Code: the ``env`` of ``~/.claude/settings.json`` (``$CLAUDE_CONFIG_DIR``
when set), which Claude Code applies to every session.

Sets ``ANTHROPIC_BASE_URL`` (the gateway, no ``/v1``), ``ANTHROPIC_AUTH_TOKEN``
(sent as ``Authorization: Bearer``), the model for the main loop, the
opus/sonnet/haiku aliases and sub-agents (so no request asks for a Claude model
the gateway does not serve), and turns off non-essential traffic (telemetry,
update checks), which a local setup has no use for. Every other setting stays.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from mlx_gateway.supervisor.connect.client import (
    Client,
    dump_json,
    home,
    load_json_object,
    object_at,
)
from mlx_gateway.supervisor.connect.target import Target

NO_KEY = "mlx-gateway"
"""Sent when the gateway has no keys: Claude Code wants a token of some kind."""
MODEL_VARIABLES = (
    "ANTHROPIC_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "CLAUDE_CODE_SUBAGENT_MODEL",
)


def path(env: Mapping[str, str]) -> Path:
    folder = env.get("CLAUDE_CONFIG_DIR")
    return (Path(folder) if folder else home(env) / ".claude") / "settings.json"


def variables(target: Target) -> dict[str, str]:
    out = {
        "ANTHROPIC_BASE_URL": target.url,
        "ANTHROPIC_AUTH_TOKEN": target.key or NO_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    out.update(dict.fromkeys(MODEL_VARIABLES, target.model))
    return out


def render(current: str | None, target: Target, file: Path) -> str:
    settings = load_json_object(current, file)
    object_at(settings, "env", file).update(variables(target))
    return dump_json(settings)


def usage(target: Target) -> str:
    return f"run `claude`: it talks to {target.url} with the model {target.model}"


CLIENT = Client("claude-code", path, render, usage)
