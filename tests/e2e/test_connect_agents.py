"""``mlx-gateway connect`` then the real Claude Code and Codex CLI, with a temporary
HOME and no environment variable of ours: the client's own config file, as
``connect`` merged it, must bring it to the gateway. The user's other settings
survive, and ``--undo`` puts the file back byte for byte.

The CLIs come from the npm registry at the releases the other agent tests pin
(their fixtures install them). A whole ``mlx-gateway launch`` process that needs a
key serves two chat models: first a tiny random llama with a 2,048-token context
(too short for either client's first request), then the same llama with 32k
positions; ``connect`` must choose the second, tell the client its context, and
``--check`` it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .gateway import MLX_GATEWAY, Gateway
from .test_coding_agents import codex  # noqa: F401  (the fixture installing Codex CLI)
from .test_coding_agents_anthropic import claude_code  # noqa: F401  (same, Claude Code)

pytestmark = pytest.mark.slow

MODEL = "tiny-connected"
SHORT = "tiny-short"
KEY = "sk-connect-test"

CLAUDE_SETTINGS = (
    '{\n    "theme": "dark",\n    "permissions": {"allow": ["Bash(ls:*)"]},\n'
    '    "env": {"MY_OWN_VARIABLE": "kept"}\n}'
)
"""The user's own settings, in a layout ``connect`` would not write (4 spaces, no
final newline): ``--undo`` must restore it exactly."""
CODEX_CONFIG = """\
# my Codex settings
model = "gpt-5"   # what I use at work
check_for_update_on_startup = false
approval_policy = "never"

[analytics]
enabled = false

[projects."/somewhere/else"]
trust_level = "trusted"
"""


@pytest.fixture(scope="module")
def gateway(
    tiny_lm_path: Path, tiny_lm_32k_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("connect")
    model = {
        "model_path": str(tiny_lm_32k_path),
        "served_model_name": MODEL,
        "idle_timeout": 0,
        "on_demand": False,
    }
    short = {**model, "model_path": str(tiny_lm_path), "served_model_name": SHORT}
    gw = Gateway(tmp, [short, model], api_keys=[KEY])
    try:
        yield gw
    finally:
        gw.stop()


def clean_env(home: Path) -> dict[str, str]:
    """Only what any shell has: no ANTHROPIC_*, CODEX_HOME, MLX_GATEWAY_* or XDG_*."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}


def connect(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(MLX_GATEWAY), "connect", *args],
        env=clean_env(home),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def requests_to(gateway: Gateway, route: str) -> int:
    """``mlx_gateway_http_requests_total`` of ``route``, every status."""
    metrics = httpx.get(
        f"{gateway.base_url}/metrics", headers={"Authorization": f"Bearer {KEY}"}, timeout=10
    ).text
    pattern = re.compile(
        rf'^mlx_gateway_http_requests_total\{{route="{re.escape(route)}",'
        r'status="(\d+)"\} (\d+)',
        re.M,
    )
    return sum(int(count) for _status, count in pattern.findall(metrics))


def test_connect_claude_code_then_claude_reaches_the_gateway(
    claude_code: Path,  # noqa: F811
    gateway: Gateway,
    tmp_path: Path,
) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(CLAUDE_SETTINGS)
    done = connect(home, "claude-code", "--config", str(gateway.config_path), "--check")
    assert "check: OK: tiny-connected's 32,768-token context holds Claude Code's" in done.stdout

    merged = json.loads(settings.read_text())
    assert merged["theme"] == "dark"
    assert merged["permissions"] == {"allow": ["Bash(ls:*)"]}
    env = merged["env"]
    assert env["MY_OWN_VARIABLE"] == "kept"
    assert env["ANTHROPIC_BASE_URL"] == gateway.base_url
    assert env["ANTHROPIC_AUTH_TOKEN"] == KEY
    assert env["ANTHROPIC_MODEL"] == MODEL  # not the first entry: its context is too short
    assert env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "32768"

    before = requests_to(gateway, "/v1/messages")
    run = subprocess.run(
        [str(claude_code), "-p", "Say hello."],
        cwd=project,
        env=clean_env(home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, f"{output}\n--- gateway log ---\n{gateway.log()[-4000:]}"
    assert "API Error" not in output
    assert requests_to(gateway, "/v1/messages") > before  # it was this gateway that answered

    connect(home, "claude-code", "--undo")
    assert settings.read_bytes() == CLAUDE_SETTINGS.encode()
    assert not settings.with_name("settings.json.mlx-gateway-backup").exists()


def test_connect_codex_then_codex_reaches_the_gateway(
    codex: Path,  # noqa: F811
    gateway: Gateway,
    tmp_path: Path,
) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    config = home / ".codex" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(CODEX_CONFIG)
    connect(home, "codex", "--config", str(gateway.config_path))

    text = config.read_text()
    # The user's comments and tables stay; the provider is added at the end.
    assert text.startswith("# my Codex settings\n")
    assert "[analytics]\nenabled = false\n" in text
    merged = tomllib.loads(text)
    assert merged["approval_policy"] == "never" and not merged["check_for_update_on_startup"]
    assert merged["projects"] == {"/somewhere/else": {"trust_level": "trusted"}}
    assert (merged["model"], merged["model_provider"]) == (MODEL, "mlx-gateway")
    assert merged["model_context_window"] == 32768
    provider = merged["model_providers"]["mlx-gateway"]
    assert provider["wire_api"] == "responses"
    assert provider["base_url"] == f"{gateway.base_url}/v1"

    before = requests_to(gateway, "/v1/responses")
    done = subprocess.run(
        [str(codex), "exec", "--skip-git-repo-check", "--json", "Say hello."],
        cwd=work,
        env=clean_env(home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    report = f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, report
    kinds = [e["type"] for e in events]
    assert "turn.completed" in kinds and "turn.failed" not in kinds, report
    usage = next(e["usage"] for e in events if e["type"] == "turn.completed")
    assert usage["input_tokens"] > 4000  # Codex's instructions reached the model
    # The context it was told is one it reads (no "ignored setting" warning).
    assert "is ignored" not in done.stderr, report
    assert requests_to(gateway, "/v1/responses") > before

    connect(home, "codex", "--undo")
    assert config.read_bytes() == CODEX_CONFIG.encode()
