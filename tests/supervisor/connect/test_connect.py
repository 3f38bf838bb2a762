"""``mlx-gateway connect``: each client's file merged, the model chosen by what fits
(asked of a real gateway serving fake workers), ``--print``, ``--undo`` and the
errors. A temporary HOME and XDG folders; the real CLIs run in
tests/e2e/test_connect_agents.py."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from mlx_gateway.supervisor.cli import build_parser
from mlx_gateway.supervisor.connect.cli import run

from ..live import LiveGateway

pytestmark = pytest.mark.slow

GB = 10**9
KEY = "sk-unit"


def fake(name: str, gb: float = 1.0, **extra: Any) -> dict[str, Any]:
    return {
        "model_path": f"{name}/ok",
        "served_model_name": name,
        "memory_estimate": int(gb * GB),
        **extra,
    }


@pytest.fixture(scope="module")
def gw() -> Iterator[LiveGateway]:
    models = [
        fake("emb", model_type="embeddings"),
        fake("big", gb=3),  # more than the budget: never chosen by itself
        fake("small", aliases=["tiny"]),
        fake("other"),
    ]
    with LiveGateway(*models, memory_budget="2.5GB", api_keys=[KEY]) as gateway:
        yield gateway


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg-config"),
        "XDG_STATE_HOME": str(tmp_path / "xdg-state"),
    }


def connect(env: dict[str, str], *argv: str) -> int:
    return run(build_parser().parse_args(["connect", *argv]), env)


def at(gw: LiveGateway, *more: str) -> list[str]:
    return ["--url", gw.url, "--api-key", KEY, *more]


def test_opencode_merge_picks_the_first_chat_model_that_fits(
    gw: LiveGateway, env: dict[str, str], capsys: Any
) -> None:
    file = Path(env["XDG_CONFIG_HOME"]) / "opencode" / "opencode.json"
    file.parent.mkdir(parents=True)
    original = {"theme": "tokyonight", "provider": {"ollama": {"npm": "x", "models": {}}}}
    file.write_text(json.dumps(original))
    assert connect(env, "opencode", *at(gw)) == 0
    config = json.loads(file.read_text())
    assert config["theme"] == "tokyonight" and config["provider"]["ollama"] == {
        "npm": "x",
        "models": {},
    }
    ours = config["provider"]["mlx-gateway"]
    assert ours["options"] == {"baseURL": f"{gw.url}/v1", "apiKey": KEY}
    assert list(ours["models"]) == ["small", "big", "other"]  # chat models only, chosen first
    assert config["model"] == "mlx-gateway/small"
    out = capsys.readouterr().out
    assert f"wrote {file} (the original is kept as {file}.mlx-gateway-backup)" in out
    assert connect(env, "opencode", "--undo") == 0
    assert json.loads(file.read_text()) == original
    assert not Path(f"{file}.mlx-gateway-backup").exists()


def test_continue_created_then_reconnected_then_removed(
    gw: LiveGateway, env: dict[str, str]
) -> None:
    file = Path(env["HOME"]) / ".continue" / "config.yaml"
    assert connect(env, "continue", *at(gw, "--model", "tiny")) == 0  # an alias is accepted
    config = yaml.safe_load(file.read_text())
    assert config["schema"] == "v1"
    (entry,) = config["models"]
    assert entry == {
        "name": "mlx-gateway: tiny",
        "provider": "openai",
        "model": "tiny",
        "apiBase": f"{gw.url}/v1",
        "apiKey": KEY,
        "roles": ["chat", "edit", "apply"],
    }
    config["models"].append({"name": "mine", "provider": "ollama", "model": "llama3"})
    file.write_text(yaml.safe_dump(config))  # the user adds a model of their own
    assert connect(env, "continue", *at(gw, "--model", "other")) == 0
    names = [m["name"] for m in yaml.safe_load(file.read_text())["models"]]
    assert names == ["mlx-gateway: other", "mine"]
    assert connect(env, "continue", "--undo") == 0
    assert not file.exists()  # connect had created it; the user's later edit is kept aside
    assert (
        yaml.safe_load(Path(f"{file}.mlx-gateway-undone").read_text())["models"][1]["name"]
        == "mine"
    )


def test_print_writes_nothing(gw: LiveGateway, env: dict[str, str], capsys: Any) -> None:
    assert connect(env, "claude-code", *at(gw), "--print") == 0
    out = capsys.readouterr().out
    file = Path(env["HOME"]) / ".claude" / "settings.json"
    assert out.startswith(f"# would write {file}:\n")
    settings = json.loads(out.split("\n", 1)[1])
    assert settings["env"]["ANTHROPIC_BASE_URL"] == gw.url
    assert settings["env"]["ANTHROPIC_MODEL"] == "small"
    assert settings["env"]["ENABLE_TOOL_SEARCH"] == "true"  # the gateway serves it
    assert settings["env"]["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0"  # no billing block
    assert not file.exists() and not Path(env["XDG_STATE_HOME"]).exists()


def test_open_webui_env_file(gw: LiveGateway, env: dict[str, str]) -> None:
    assert connect(env, "open-webui", *at(gw)) == 0
    file = Path(env["XDG_CONFIG_HOME"]) / "mlx-gateway" / "open-webui.env"
    lines = dict(
        line.split("=", 1) for line in file.read_text().splitlines() if not line.startswith("#")
    )
    assert lines["OPENAI_API_BASE_URL"] == f"{gw.url}/v1" and lines["OPENAI_API_KEY"] == KEY
    assert lines["DEFAULT_MODELS"] == "small"


def test_errors_name_the_problem(gw: LiveGateway, env: dict[str, str], capsys: Any) -> None:
    settings = Path(env["HOME"]) / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"env": {')
    assert connect(env, "claude-code", *at(gw)) == 1
    assert f"{settings} is not valid JSON" in capsys.readouterr().err
    assert settings.read_text() == '{"env": {'  # untouched
    assert connect(env, "codex", *at(gw, "--model", "emb")) == 1
    assert "no chat model 'emb'; its chat models: big, small, other" in capsys.readouterr().err
    assert connect(env, "codex", "--undo") == 1
    assert "codex is not connected by mlx-gateway: nothing to undo" in capsys.readouterr().err
    assert connect(env, "codex", "--url", gw.url) == 1  # no key: the gateway refuses
    assert "401" in capsys.readouterr().err


def test_without_a_gateway_the_config_decides(
    tmp_path: Path, env: dict[str, str], capsys: Any
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "server": {"port": 1, "api_keys": ["sk-from-config"]},  # nothing listens there
                "models": [
                    {"model_path": "a/emb", "served_model_name": "e", "model_type": "embeddings"},
                    {"model_path": "a/chat", "served_model_name": "chatty"},
                ],
            }
        )
    )
    assert connect(env, "codex", "--config", str(config)) == 0
    text = (Path(env["HOME"]) / ".codex" / "config.toml").read_text()
    assert 'model = "chatty"' in text and 'experimental_bearer_token = "sk-from-config"' in text
    assert 'base_url = "http://127.0.0.1:1/v1"' in text
    assert "the model was chosen from the config" in capsys.readouterr().err
    assert connect(env, "opencode", "--url", "http://127.0.0.1:1") == 1
    assert "name the model with --model" in capsys.readouterr().err


def config_file(tmp_path: Path, *models: dict[str, Any]) -> Path:
    """A config whose gateway is not running (port 1): the config's numbers decide."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"server": {"port": 1}, "models": list(models)}))
    return path


def chat_model(name: str, context: int, **extra: Any) -> dict[str, Any]:
    return {
        "model_path": f"a/{name}",
        "served_model_name": name,
        "context_length": context,
        **extra,
    }


def test_coding_clients_get_a_context_that_holds_their_first_request(
    tmp_path: Path, env: dict[str, str]
) -> None:
    config = config_file(
        tmp_path,
        chat_model("short", 8192),
        chat_model("toolless", 131072, tool_call_parser="none"),
        chat_model("long", 32768),
        chat_model("longer", 65536),
    )
    assert connect(env, "claude-code", "--config", str(config)) == 0
    settings = json.loads((Path(env["HOME"]) / ".claude" / "settings.json").read_text())["env"]
    # Tool-capable first, then the longest context: not the first entry, not toolless.
    assert settings["ANTHROPIC_MODEL"] == "longer"
    assert settings["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "65536"
    assert settings["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "65536"
    assert settings["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "16384"

    assert connect(env, "codex", "--config", str(config)) == 0
    codex = tomllib.loads((Path(env["HOME"]) / ".codex" / "config.toml").read_text())
    assert codex["model"] == "longer"
    assert codex["model_context_window"] == 65536
    assert codex["model_auto_compact_token_limit"] == 65536 - 16384

    assert connect(env, "opencode", "--config", str(config)) == 0
    opencode = json.loads((Path(env["XDG_CONFIG_HOME"]) / "opencode" / "opencode.json").read_text())
    models = opencode["provider"]["mlx-gateway"]["models"]
    assert models["long"]["limit"] == {"context": 32768, "output": 8192}
    assert opencode["model"] == "mlx-gateway/short"  # no measured needs: the first, as before

    assert connect(env, "continue", "--config", str(config), "--model", "long") == 0
    entry = yaml.safe_load((Path(env["HOME"]) / ".continue" / "config.yaml").read_text())
    assert entry["models"][0]["defaultCompletionOptions"] == {
        "contextLength": 32768,
        "maxTokens": 8192,
    }


def test_nothing_long_enough_is_an_error_that_writes_nothing(
    tmp_path: Path, env: dict[str, str], capsys: Any
) -> None:
    config = config_file(tmp_path, chat_model("tiny", 2048), chat_model("smol", 8192))
    settings = Path(env["HOME"]) / ".claude" / "settings.json"
    assert connect(env, "claude-code", "--config", str(config)) == 1
    err = capsys.readouterr().err
    assert "Claude Code sends about 20,857 tokens in its first request" in err
    assert "the longest context here is 8,192 (smol; all: tiny 2,048, smol 8,192)" in err
    assert "--force" in err and "context_length" in err
    assert not settings.exists()
    assert connect(env, "codex", "--config", str(config)) == 1
    assert "Codex sends about 9,643 tokens" in capsys.readouterr().err
    assert not (Path(env["HOME"]) / ".codex").exists()

    assert connect(env, "claude-code", "--config", str(config), "--force") == 0
    out = capsys.readouterr()
    assert "(--force: written anyway)" in out.err
    assert json.loads(settings.read_text())["env"]["ANTHROPIC_MODEL"] == "smol"  # the longest

    # --model overrides, with a warning.
    assert connect(env, "claude-code", "--config", str(config), "--model", "tiny") == 0
    assert "tiny has a 2,048-token context; Claude Code sends about" in capsys.readouterr().err
    assert json.loads(settings.read_text())["env"]["ANTHROPIC_MODEL"] == "tiny"
