"""``mlx-gateway connect`` then the real Claude Code and Codex CLI, with a temporary
HOME and no environment variable of ours: the client's own config file, as
``connect`` merged it, must bring it to the gateway. The user's other settings
survive, and ``--undo`` puts the file back byte for byte.

The CLIs come from the npm registry at the releases the other agent tests pin
(their fixtures install them). A whole ``mlx-gateway launch`` process that needs a
key serves two chat models: first a tiny random llama with a 2,048-token context
(too short for either client's first request), then the same llama with 32k
positions; ``connect`` must choose the second, tell the client its context, and
``--check`` it (the gateway counts a request of the client's shape with the model's
tokenizer). A third, the same 32k llama with its prefill slowed to
:data:`SLOW_TPS` tokens per second, is too slow for either client's watchdog once
its worker measured that.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mlx_gateway.workers.lm.prefill_pace import THROTTLE_ENV

from .gateway import MLX_GATEWAY, Gateway
from .test_coding_agents import codex  # noqa: F401  (the fixture installing Codex CLI)
from .test_coding_agents_anthropic import claude_code  # noqa: F401  (same, Claude Code)

pytestmark = pytest.mark.slow

MODEL = "tiny-connected"
SHORT = "tiny-short"
SLOW = "tiny-slow"
SLOW_TPS = 25
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
    slow = {**model, "served_model_name": SLOW, "worker_env": {THROTTLE_ENV: str(SLOW_TPS)}}
    # debug: the log says when a Messages request brought a billing block
    gw = Gateway(tmp, [short, model, slow], api_keys=[KEY], log_level="debug")
    try:
        yield gw
    finally:
        gw.stop()


def clean_env(home: Path) -> dict[str, str]:
    """Only what any shell has: no ANTHROPIC_*, CODEX_HOME, MLX_GATEWAY_* or XDG_*."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}


def connect(home: Path, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(MLX_GATEWAY), "connect", *args],
        env=clean_env(home),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == code, done.stdout + done.stderr
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
    ok = re.search(
        r"check: OK: Claude Code's first request \(as measured on Claude Code "
        r"2\.1\.197.*\) counts ([\d,]+) tokens with tiny-connected's tokenizer; ([\d,]+) to "
        r"spare of 32,768; prefill speed not measured yet",
        done.stdout,
    )
    assert ok, done.stdout + done.stderr
    counted = int(ok[1].replace(",", ""))
    assert counted + int(ok[2].replace(",", "")) == 32768
    assert requests_to(gateway, "/v1/messages/count_tokens") == 1  # counted, not generated

    merged = json.loads(settings.read_text())
    assert merged["theme"] == "dark"
    assert merged["permissions"] == {"allow": ["Bash(ls:*)"]}
    env = merged["env"]
    assert env["MY_OWN_VARIABLE"] == "kept"
    assert env["ANTHROPIC_BASE_URL"] == gateway.base_url
    assert env["ANTHROPIC_AUTH_TOKEN"] == KEY
    assert env["ANTHROPIC_MODEL"] == MODEL  # not the first entry: its context is too short
    assert env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "32768"
    assert env["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0"

    before = requests_to(gateway, "/v1/messages")
    logged = len(gateway.log())
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
    # With the setting connect wrote, Claude Code sent no billing block at all.
    assert "dropped the billing block" not in gateway.log()[logged:]

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
    done, events = codex_exec(codex, home, work)
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


CATALOG_ENTRY: dict[str, object] = {
    "slug": MODEL,
    "display_name": MODEL,
    "supported_reasoning_levels": [],
    "shell_type": "default",
    "visibility": "none",
    "supported_in_api": True,
    "priority": 0,
    "support_verbosity": False,
    "truncation_policy": {"mode": "bytes", "limit": 10000},
    "experimental_supported_tools": [],
    "context_window": 32768,
}
"""A ``model_catalog_json`` entry for the served model with every field Codex 0.169
requires (found one ``missing field`` error at a time) and the context window, but no
instructions of its own: ``connect`` has none to give it but Codex's own prompt."""


def codex_exec(
    binary: Path, home: Path, work: Path, *config: str
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, object]]]:
    """``codex exec --json "Say hello."`` with ``-c`` overrides; the run and its events."""
    overrides = [arg for setting in config for arg in ("-c", setting)]
    done = subprocess.run(
        [str(binary), "exec", "--skip-git-repo-check", "--json", *overrides, "Say hello."],
        cwd=work,
        env=clean_env(home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done, events


def notices(events: list[dict[str, object]]) -> list[str]:
    """Codex's own notices (``error`` items of a run that goes on)."""
    found = []
    for event in events:
        item = event.get("item")
        if event["type"] == "item.completed" and isinstance(item, dict) and item["type"] == "error":
            found.append(str(item["message"]))
    return found


def input_tokens(events: list[dict[str, object]]) -> int:
    usage = next(e["usage"] for e in events if e["type"] == "turn.completed")
    assert isinstance(usage, dict)
    return int(usage["input_tokens"])


def test_codex_metadata_notice_goes_only_with_a_catalog_that_replaces_its_prompt(
    codex: Path,  # noqa: F811
    gateway: Gateway,
    tmp_path: Path,
) -> None:
    """Why ``connect codex`` leaves Codex's "Model metadata … not found" notice
    (docs/operations.md): with Codex 0.169 only a ``model_catalog_json`` entry for the
    model silences it, that entry must carry the instructions Codex sends (its own
    prompt, built into the binary, is not used for a catalog entry), and the catalog
    replaces Codex's whole bundled one. Measured here with the real Codex, so that a
    release that lifts any of this fails the test."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    connect(home, "codex", "--config", str(gateway.config_path))

    # As connect wrote it: Codex's own instructions go out, with the notice.
    done, events = codex_exec(codex, home, work)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert notices(events) == [
        f"Model metadata for `{MODEL}` not found. Defaulting to fallback metadata; "
        "this can degrade performance and cause issues."
    ]
    own_prompt = input_tokens(events)

    # An entry without instructions: Codex refuses the whole catalog and starts nothing.
    catalog = tmp_path / "catalog.json"
    catalog.write_text(json.dumps({"models": [CATALOG_ENTRY]}))
    setting = f'model_catalog_json="{catalog}"'
    done, _ = codex_exec(codex, home, work, setting)
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    assert (
        f"model `{MODEL}` is missing both `base_instructions` and "
        "`model_messages.instructions_template`" in done.stderr
    ), done.stderr[-3000:]

    # With empty instructions: no notice, but Codex's prompt is gone from the request.
    catalog.write_text(json.dumps({"models": [{**CATALOG_ENTRY, "base_instructions": ""}]}))
    done, events = codex_exec(codex, home, work, setting)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert notices(events) == [], done.stdout
    assert input_tokens(events) < own_prompt - 2000, (input_tokens(events), own_prompt)

    # And the catalog is all Codex knows: its own models are no longer in it.
    listed = subprocess.run(
        [str(codex), "debug", "models", "-c", setting],
        cwd=work,
        env=clean_env(home),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert [m["slug"] for m in json.loads(listed.stdout)["models"]] == [MODEL]


def test_check_says_too_long_and_too_slow_with_the_numbers(
    gateway: Gateway, tmp_path: Path
) -> None:
    """``--check`` of a model whose context cannot hold the first request as its own
    tokenizer counts it, then of one whose measured prefill speed makes Codex wait
    longer than its stream idle timeout: exit 1, the numbers said."""
    home = tmp_path / "home"
    config = ("--config", str(gateway.config_path))
    done = connect(home, "claude-code", *config, "--model", SHORT, "--force", "--check", code=1)
    assert re.search(
        r"check: TOO LONG: Claude Code's first request .* counts [\d,]+ tokens with "
        r"tiny-short's tokenizer; tiny-short has a 2,048-token context",
        done.stderr,
    ), done.stdout + done.stderr

    # Nothing measured yet: the check cannot tell, and says so.
    done = connect(home, "codex", *config, "--model", SLOW, "--check")
    assert "prefill speed not measured yet" in done.stdout, done.stdout
    # A prompt read at SLOW_TPS tokens/s: its worker measures the speed and says it.
    prompt = "Read the file before you change it, keep the edit small. " * 8
    reply = httpx.post(
        f"{gateway.base_url}/v1/completions",
        headers={"Authorization": f"Bearer {KEY}"},
        json={"model": SLOW, "prompt": prompt, "max_tokens": 1},
        timeout=120,
    )
    assert reply.status_code == 200, reply.text
    entry: dict[str, object] = {}
    for _ in range(20):  # the next heartbeat carries it (every 2 s)
        entry = httpx.get(
            f"{gateway.base_url}/v1/models/{SLOW}",
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=10,
        ).json()
        if entry.get("prefill_tps"):
            break
        time.sleep(0.5)
    rate = entry.get("prefill_tps")
    assert isinstance(rate, float) and SLOW_TPS * 0.8 <= rate <= SLOW_TPS * 1.05, entry

    done = connect(home, "codex", *config, "--model", SLOW, "--check", code=1)
    slow = re.search(
        r"check: TOO SLOW: Codex's first request .* counts ([\d,]+) tokens with tiny-slow's "
        r"tokenizer; tiny-slow reads prompts at about (\d+) tokens/s \(measured by its "
        r"worker\): .* takes about ([\d,]+) s to read, longer than the 300 s Codex waits "
        r"\(stream_idle_timeout_ms",
        done.stderr,
    )
    assert slow, done.stdout + done.stderr
    tokens, seconds = int(slow[1].replace(",", "")), int(slow[3].replace(",", ""))
    assert abs(seconds - tokens / rate) <= 1
    # connect itself warns too (it knows the speed from /v1/models), and still writes.
    assert f"{SLOW} reads prompts at about" in done.stderr and "wrote " in done.stdout
