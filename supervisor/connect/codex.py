"""Codex CLI: ``~/.codex/config.toml`` (``$CODEX_HOME`` when set).

Adds a ``[model_providers.mlx-gateway]`` on the Responses API (``wire_api =
"responses"``, the key as ``experimental_bearer_token`` when the gateway has keys,
so no environment variable is needed) and makes it the default: the top-level
``model_provider`` and ``model``. (Codex 0.169 refuses profiles inside
``config.toml``, the top-level ``profile`` key and ``[profiles.*]`` tables alike:
its profiles are separate ``<name>.config.toml`` files layered over it, so the
user's own profiles keep working.) The file is edited with tomlkit: its comments,
order and other tables stay as they were. When the model's context length is
known, ``model_context_window`` and ``model_auto_compact_token_limit`` (the
context less a completion's room) tell Codex when to compact. (Codex 0.169
ignores ``model_max_output_tokens``. Its "Model metadata … not found" notice stays:
only a ``model_catalog_json`` entry silences it, and such an entry must carry the
instructions Codex sends, which its binary keeps to itself, and replaces Codex's
whole bundled catalog; see docs/operations.md.)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from mlx_gateway.supervisor.connect.client import PROVIDER, Client, home
from mlx_gateway.supervisor.connect.files import ConnectError
from mlx_gateway.supervisor.connect.needs import Needs, output_cap
from mlx_gateway.supervisor.connect.target import Target

NEEDS = Needs(
    "Codex",
    tokens=9_643,
    measured_on="Codex CLI 0.169.0 (`codex exec`, 9 default tools)",
    system_tokens=5_269,
    tool_tokens=4_374,
    tool_count=9,
    watchdog=300.0,
    watchdog_setting="stream_idle_timeout_ms of [model_providers.mlx-gateway], "
    "300000 ms by default",
)
"""Its first request, captured: 5,269 tokens of instructions and input, 4,374 of
tool definitions (GPT-2 BPE). Its watchdog: a provider's ``stream_idle_timeout_ms``
(300,000 by default in 0.169.0's ``ModelProviderInfo``): the longest wait between
two events of a Responses stream, the first one included."""


def path(env: Mapping[str, str]) -> Path:
    folder = env.get("CODEX_HOME")
    return (Path(folder) if folder else home(env) / ".codex") / "config.toml"


def _super_table(doc: Any, key: str, file: Path) -> Any:
    if key not in doc:
        doc[key] = tomlkit.table(is_super_table=True)
    value = doc[key]
    if not isinstance(value, dict):
        raise ConnectError(f"{file}: `{key}` is a {type(value).__name__}, not a table")
    return value


def render(current: str | None, target: Target, file: Path) -> str:
    try:
        doc = tomlkit.parse(current or "")
    except TOMLKitError as exc:
        raise ConnectError(
            f"{file} is not valid TOML ({exc}); fix it or move it away, then run connect again"
        ) from None
    provider = tomlkit.table()
    provider["name"] = PROVIDER
    provider["base_url"] = target.v1
    provider["wire_api"] = "responses"
    if target.key:
        provider["experimental_bearer_token"] = target.key
    doc["model_provider"] = PROVIDER
    doc["model"] = target.model
    if target.window is not None:
        doc["model_context_window"] = target.window
        doc["model_auto_compact_token_limit"] = target.window - output_cap(target.window, NEEDS)
    _super_table(doc, "model_providers", file)[PROVIDER] = provider
    return tomlkit.dumps(doc)


def usage(target: Target) -> str:
    return (
        f"run `codex`: its default provider '{PROVIDER}' is {target.v1}, "
        f"with the model {target.model}"
    )


CLIENT = Client("codex", path, render, usage, NEEDS)
