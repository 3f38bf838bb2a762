"""Claude Code: the ``env`` of ``~/.claude/settings.json`` (``$CLAUDE_CONFIG_DIR``
when set), which Claude Code applies to every session.

Sets ``ANTHROPIC_BASE_URL`` (the gateway, no ``/v1``), ``ANTHROPIC_AUTH_TOKEN``
(sent as ``Authorization: Bearer``), the model for the main loop, the
opus/sonnet/haiku aliases and sub-agents (so no request asks for a Claude model
the gateway does not serve), and turns off non-essential traffic (telemetry,
update checks), which a local setup has no use for, and turns tool search on
(``ENABLE_TOOL_SEARCH``: Claude Code turns it off for a base URL that is not
Anthropic's, and then renders every MCP tool's schema into the prompt; the gateway
serves ``defer_loading``, the tool search tools and Claude Code's own
``ToolSearch``), and ``CLAUDE_CODE_ATTRIBUTION_HEADER=0``, so its billing block (which
differs in every session) is not sent at all (the gateway drops it anyway: two
sessions share their cached prompt either way). When the model's context length is
known, it also tells Claude Code the limits: ``CLAUDE_CODE_MAX_CONTEXT_TOKENS`` (the
window of a model it does not know, which it otherwise takes for 1M tokens, 2.1.3xx),
``CLAUDE_CODE_AUTO_COMPACT_WINDOW`` (the context it compacts against) and
``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` (its ``max_tokens``, 32000 by default). Every
other setting stays.
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
from mlx_gateway.supervisor.connect.needs import Needs, output_cap
from mlx_gateway.supervisor.connect.target import Target

NEEDS = Needs(
    "Claude Code",
    tokens=20_857,
    measured_on="Claude Code 2.1.197 (`claude -p`, 24 default tools)",
    default_max_tokens=32_000,
    system_tokens=1_566,
    tool_tokens=17_589,
    tool_count=24,
    watchdog=600.0,
    watchdog_setting="API_TIMEOUT_MS, 600000 ms by default, in the env of settings.json",
    api="anthropic",
)
"""Its first request, captured: 1,566 tokens of system prompt, 17,589 of tool
definitions, 1,702 of messages (GPT-2 BPE; SmolLM2's tokenizer: 20,328).

Its watchdog, from 2.1.197's own code: the Anthropic client's ``timeout`` is
``parseInt(process.env.API_TIMEOUT_MS || "600000")``. (Its stream-idle watchdog,
``CLAUDE_STREAM_IDLE_TIMEOUT_MS``, at least 300 s, ignores ``ping`` events; the
gateway's Messages streams send a ``message_delta`` that changes nothing every 30 s
of a long prefill, which it does count.)"""

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
        "ENABLE_TOOL_SEARCH": "true",
        "CLAUDE_CODE_ATTRIBUTION_HEADER": "0",
    }
    out.update(dict.fromkeys(MODEL_VARIABLES, target.model))
    if target.window is not None:
        out["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] = str(target.window)
        out["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] = str(target.window)
        out["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(output_cap(target.window, NEEDS))
    return out


def render(current: str | None, target: Target, file: Path) -> str:
    settings = load_json_object(current, file)
    object_at(settings, "env", file).update(variables(target))
    return dump_json(settings)


def usage(target: Target) -> str:
    return f"run `claude`: it talks to {target.url} with the model {target.model}"


CLIENT = Client("claude-code", path, render, usage, NEEDS)
