"""``server.keys`` (keys as apps): the key read from the file, the environment or
inline, and errors that name the app, the key and the line, never the key itself."""

from __future__ import annotations

import textwrap
from pathlib import Path

import openai
import pytest

from mlx_gateway.supervisor.config import ConfigError, GatewayConfig, load_config

from ..live import LiveGateway

HEAD = """\
models:
  - model_path: fake/ok
server:
  keys:
"""


def write(tmp_path: Path, keys: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(HEAD + textwrap.indent(textwrap.dedent(keys).strip("\n"), "    ") + "\n")
    return path


def load(tmp_path: Path, keys: str) -> GatewayConfig:
    return load_config(write(tmp_path, keys))


def error(tmp_path: Path, keys: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, keys)
    return info.value


def test_every_field(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_KEY", "  sk-from-env  ")
    (tmp_path / "ha.key").write_text("sk-from-file\n")
    config = load(
        tmp_path,
        """
        - name: chat
          key: sk-inline
          models: [qwen*, fake/ok]
          requests_per_minute: 30
          tokens_per_minute: 20000
          tokens_per_day: 1000000
          max_concurrent: 2
        - name: agent
          key_env: AGENT_KEY
          priority: batch
        - name: home-assistant
          key_file: ha.key
          models: whisper
          role: read-only
        """,
    )
    chat, agent, ha = config.server.keys
    assert (chat.key, chat.models, chat.role, chat.priority) == (
        "sk-inline",
        ["qwen*", "fake/ok"],
        "client",
        "interactive",
    )
    assert (chat.requests_per_minute, chat.tokens_per_minute) == (30, 20000)
    assert (chat.tokens_per_day, chat.max_concurrent) == (1000000, 2)
    assert (agent.key, agent.key_env, agent.priority, agent.models) == (
        "sk-from-env",
        "AGENT_KEY",
        "batch",
        None,
    )
    assert (ha.key, ha.key_file, ha.models, ha.role) == (
        "sk-from-file",
        str(tmp_path / "ha.key"),
        ["whisper"],
        "read-only",
    )
    assert "sk-" not in repr(config.server.keys)


@pytest.mark.parametrize(
    ("keys", "line", "said"),
    [
        ("- name: a\n", 5, "server.keys[0] at {file}:5: app 'a' needs exactly one of key"),
        (
            "- name: a\n  key: sk-1\n  key_env: X\n",
            5,
            "needs exactly one of key, key_env or key_file (got key and key_env)",
        ),
        ("- key: sk-1\n", 5, "missing 'name'"),
        (
            "- name: a\n  key_env: MLX_GATEWAY_TEST_UNSET\n",
            6,
            "server.keys[0].key_env at {file}:6: app 'a': the environment variable "
            "MLX_GATEWAY_TEST_UNSET is not set or empty",
        ),
        ("- name: a\n  key_file: nowhere.key\n", 6, "cannot read the key file"),
        (
            "- name: a\n  key: sk-1\n  modles: [x]\n",
            7,
            "unknown key 'modles' in app 'a'; did you mean 'models'?",
        ),
        ("- name: a\n  key: sk-1\n  role: owner\n", 7, "server.keys[0].role at {file}:7"),
        ("- name: a\n  key: sk-1\n  max_concurrent: 0\n", 7, "server.keys[0].max_concurrent"),
        (
            "- name: a\n  key: sk-1\n- name: a\n  key: sk-2\n",
            7,
            "the app name 'a' is already used by server.keys[0]",
        ),
        (
            "- name: a\n  key: sk-same\n- name: b\n  key: sk-same\n",
            8,
            "app 'b' has the same key as server.keys[0] ('a')",
        ),
    ],
)
def test_errors_name_the_app_key_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: str, line: int, said: str
) -> None:
    monkeypatch.delenv("MLX_GATEWAY_TEST_UNSET", raising=False)
    problem = error(tmp_path, keys)
    file = str(tmp_path / "config.yaml")
    assert said.format(file=file) in str(problem), str(problem)
    assert problem.line == line
    assert "sk-same" not in str(problem) and "sk-1" not in str(problem)


def test_the_key_is_no_other_apps(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(HEAD + "    - name: a\n      key: sk-1\n  api_keys: [sk-1]\n")
    with pytest.raises(ConfigError, match=r"app 'a' has the same key as server.api_keys"):
        load_config(path)


def test_wyoming_key_names_an_app(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(HEAD + "    - name: ha\n      key: sk-1\n  wyoming:\n    key: hass\n")
    with pytest.raises(ConfigError, match=r"server.wyoming.key at .*:8: 'hass' is no app"):
        load_config(path)
    path.write_text(HEAD + "    - name: ha\n      key: sk-1\n  wyoming:\n    key: ha\n")
    assert load_config(path).server.wyoming is not None


def test_keys_from_env_and_file_open_a_real_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENT_KEY", "sk-agent")
    (tmp_path / "ha.key").write_text("sk-ha\n")
    config = load(
        tmp_path,
        """
        - name: agent
          key_env: AGENT_KEY
        - name: ha
          key_file: ha.key
        """,
    )
    with LiveGateway(config=config) as gw:
        for key in ("sk-agent", "sk-ha"):
            client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0)
            assert [m.id for m in client.models.list()] == ["fake/ok"]
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=f"{gw.url}/v1", api_key="AGENT_KEY", max_retries=0).models.list()


def test_a_scope_that_matches_nothing_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = load(tmp_path, "- name: a\n  key: sk-1\n  models: [fake/*, qwen3-8]\n")
    assert config.server.keys[0].models == ["fake/*", "qwen3-8"]
    warned = [r.getMessage() for r in caplog.records if "matches no model" in r.getMessage()]
    assert len(warned) == 1 and "'qwen3-8'" in warned[0] and "config.yaml:7" in warned[0]


def test_a_tool_scope(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = load(tmp_path, "- name: a\n  key: sk-1\n  tools: [web_*, home-asistant]\n")
    assert config.server.keys[0].tools == ["web_*", "home-asistant"]
    warned = [r.getMessage() for r in caplog.records if "names no tool" in r.getMessage()]
    assert len(warned) == 1 and "'home-asistant'" in warned[0] and "config.yaml:7" in warned[0]
    assert "its tools: web_search, web_fetch, mcp_url" in warned[0]
    one = load(tmp_path, "- name: a\n  key: sk-1\n  tools: web_search\n")
    assert one.server.keys[0].tools == ["web_search"]  # one name without the list
    assert load(tmp_path, "- name: a\n  key: sk-1\n").server.keys[0].tools is None
