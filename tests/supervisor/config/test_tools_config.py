"""The ``tools:`` section: limits, web search and fetch, MCP servers in the shape of
a Claude or Cursor ``mcp.json`` (pasted in, or read from the file), and the models'
``server_tools``."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from mlx_gateway.supervisor.config import ToolsConfig

from .test_config import HF_ID, error_of, load, write

MODEL = f"models:\n  - model_path: {HF_ID}\n"

CLAUDE_MCP_JSON = {
    "mcpServers": {
        "time": {
            "command": "uvx",
            "args": ["mcp-server-time", "--local-timezone=Europe/Berlin"],
        },
        "git": {
            "type": "stdio",
            "command": "uvx",
            "args": ["mcp-server-git", "--repository", "/home/me/src/project"],
            "env": {"GIT_TERMINAL_PROMPT": "0"},
        },
        "home-assistant": {
            "type": "http",
            "url": "http://homeassistant.local:8123/api/mcp",
            "headers": {"Authorization": "Bearer eyJhbGciOi"},
        },
        "old": {"command": "npx", "args": ["-y", "some-server"], "disabled": True},
    }
}


def test_left_out_the_section_has_its_defaults(tmp_path: Path) -> None:
    tools = load(tmp_path, MODEL).tools
    assert tools == ToolsConfig()
    assert (tools.max_rounds, tools.allow_private_urls, tools.mcp_idle_timeout) == (8, False, 300)
    assert (tools.web_search.searxng_url, tools.web_search.max_results) == (None, 5)
    assert tools.mcp_servers == {} and tools.mcp_config is None


def test_every_key(tmp_path: Path) -> None:
    tools = load(
        tmp_path,
        textwrap.dedent(
            """
        tools:
          max_rounds: 3
          allow_private_urls: ["http://192.168.1.10:8123/api/mcp"]
          web_search: {searxng_url: "http://searx.lan:8080", max_results: 10, timeout: 5s}
          fetch: {max_bytes: 1000000, timeout: 1m}
          mcp_idle_timeout: 10m
          mcp_timeout: 30
        """
        )
        + MODEL,
    ).tools
    assert tools.max_rounds == 3
    assert tools.allow_private_urls == ["http://192.168.1.10:8123/api/mcp"]
    assert (tools.web_search.searxng_url, tools.web_search.timeout) == ("http://searx.lan:8080", 5)
    assert (tools.fetch.max_bytes, tools.fetch.timeout) == (1_000_000, 60)
    assert (tools.mcp_idle_timeout, tools.mcp_timeout) == (600, 30)


def test_a_claude_mcp_json_pastes_in(tmp_path: Path) -> None:
    """The file's ``mcpServers`` object, pasted under ``mcp_servers`` (JSON is YAML)."""
    pasted = json.dumps(CLAUDE_MCP_JSON["mcpServers"], indent=2).replace("\n", "\n    ")
    tools = load(tmp_path, f"tools:\n  mcp_servers:\n    {pasted}\n" + MODEL).tools
    _check_claude_servers(tools)


def test_mcp_config_reads_the_file_and_the_config_wins(tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text(json.dumps(CLAUDE_MCP_JSON, indent=2))
    tools = load(
        tmp_path,
        textwrap.dedent(
            """
        tools:
          mcp_config: mcp.json
          mcp_servers:
            time: {command: /opt/bin/mcp-server-time}
            fetch: {command: uvx, args: [mcp-server-fetch], cwd: ./work, timeout: 2m}
        """
        )
        + MODEL,
    ).tools
    assert tools.mcp_config == str(tmp_path / "mcp.json")
    assert tools.mcp_servers["time"].command == "/opt/bin/mcp-server-time"
    assert tools.mcp_servers["time"].args == []
    fetch = tools.mcp_servers["fetch"]
    assert (fetch.cwd, fetch.timeout) == (str(tmp_path / "work"), 120)
    assert set(tools.mcp_servers) == {"time", "git", "home-assistant", "fetch"}
    assert tools.mcp_servers["git"].env == {"GIT_TERMINAL_PROMPT": "0"}


def _check_claude_servers(tools: ToolsConfig) -> None:
    servers = tools.mcp_servers
    assert set(servers) == {"time", "git", "home-assistant"}  # "old" is disabled
    assert (servers["time"].command, servers["time"].transport) == ("uvx", "stdio")
    assert servers["time"].args == ["mcp-server-time", "--local-timezone=Europe/Berlin"]
    assert servers["git"].env == {"GIT_TERMINAL_PROMPT": "0"}
    hass = servers["home-assistant"]
    assert (hass.url, hass.transport) == ("http://homeassistant.local:8123/api/mcp", "http")
    assert hass.headers == {"Authorization": "Bearer eyJhbGciOi"}


@pytest.mark.parametrize(
    ("entry", "line", "message"),
    [
        (
            "type: sse\n      url: http://x:8000/sse",
            4,
            "tools.mcp_servers.s.type at {path}:4: the SSE transport (deprecated by MCP) is not "
            "supported; give the server's streamable HTTP endpoint as url",
        ),
        (
            "transport: websocket\n      url: http://x/mcp",
            4,
            "tools.mcp_servers.s.transport at {path}:4: unknown transport 'websocket'",
        ),
        (
            "command: uvx\n      url: http://x/mcp",
            5,
            "tools.mcp_servers.s.url at {path}:5: give command (a stdio server) or url (a "
            "streamable HTTP server), not both",
        ),
        (
            "args: [x]",
            4,
            "tools.mcp_servers.s at {path}:4: missing 'command' (a server run over stdio) or "
            "'url' (a streamable HTTP server)",
        ),
        (
            "comand: uvx",
            4,
            "unknown key 'comand' in tools.mcp_servers.s at {path}:4; did you mean 'command'?",
        ),
        (
            "command: uvx\n      headers: {A: b}",
            5,
            "tools.mcp_servers.s.headers at {path}:5: headers applies to a server given by url; "
            "this one runs a command (stdio)",
        ),
        (
            "url: http://x/mcp\n      env: {A: b}",
            5,
            "tools.mcp_servers.s.env at {path}:5: env applies to a server run by command",
        ),
        (
            "type: stdio\n      url: http://x/mcp",
            4,
            "tools.mcp_servers.s.type at {path}:4: type: stdio does not match the entry's url",
        ),
        (
            "command: uvx\n      args: mcp-server-time",
            5,
            "tools.mcp_servers.s.args at {path}:5: expected a list, got 'mcp-server-time'",
        ),
        (
            "command: uvx\n      env: {TZ: [a]}",
            5,
            "tools.mcp_servers.s.env.TZ at {path}:5: expected a string, got a list",
        ),
        (
            "url: ftp://x/mcp",
            4,
            "tools.mcp_servers.s.url at {path}:4: expected an http:// or https:// URL, got 'ftp://x/mcp'",
        ),
        (
            "command: uvx\n      timeout: soon",
            5,
            "tools.mcp_servers.s.timeout at {path}:5: expected a number, got 'soon'",
        ),
    ],
)
def test_a_bad_server_entry_names_its_key_and_line(
    tmp_path: Path, entry: str, line: int, message: str
) -> None:
    path = write(tmp_path, f"tools:\n  mcp_servers:\n    s:\n      {entry}\n" + MODEL)
    err = error_of(path)
    assert message.format(path=path) in str(err)
    assert err.line == line


@pytest.mark.parametrize(
    ("section", "line", "message"),
    [
        (
            "tools:\n  max_round: 3\n",
            2,
            "unknown key 'max_round' in tools at {path}:2; did you mean 'max_rounds'?",
        ),
        (
            "tools:\n  max_rounds: 0\n",
            2,
            "tools.max_rounds at {path}:2: expected an integer >= 1, got 0",
        ),
        ("tools: [a]\n", 1, "tools at {path}:1: expected a mapping of tool settings, got a list"),
        (
            "tools:\n  web_search: {max_results: 50}\n",
            2,
            "tools.web_search.max_results at {path}:2: expected an integer <= 20, got 50",
        ),
        (
            "tools:\n  web_search: {searxng: x}\n",
            2,
            "unknown key 'searxng' in tools.web_search at {path}:2; did you mean 'searxng_url'?",
        ),
        (
            "tools:\n  web_search: {searxng_url: searx.lan}\n",
            2,
            "tools.web_search.searxng_url at {path}:2: expected an http:// or https:// URL",
        ),
        (
            "tools:\n  mcp_servers: [time]\n",
            2,
            "tools.mcp_servers at {path}:2: expected a mapping of label: server",
        ),
        (
            "tools:\n  mcp_idle_timeout: later\n",
            2,
            "tools.mcp_idle_timeout at {path}:2: expected a number, got 'later'",
        ),
        (
            "tools:\n  allow_private_urls: maybe\n",
            2,
            "tools.allow_private_urls at {path}:2: expected true or false or a list",
        ),
    ],
)
def test_a_bad_tools_key_names_its_line(
    tmp_path: Path, section: str, line: int, message: str
) -> None:
    path = write(tmp_path, section + MODEL)
    err = error_of(path)
    assert message.format(path=path) in str(err)
    assert err.line == line


def test_errors_in_the_mcp_json_name_that_file_and_its_line(tmp_path: Path) -> None:
    config = write(tmp_path, "tools:\n  mcp_config: mcp.json\n" + MODEL)
    err = error_of(config)
    assert (
        f"tools.mcp_config at {config}:2: MCP config file '{tmp_path / 'mcp.json'}' does not exist"
        in str(err)
    )

    mcp_json = tmp_path / "mcp.json"
    mcp_json.write_text('{\n  "mcpServers": {\n    "time": {"command": "uvx",}\n  }\n}\n')
    err = error_of(config)
    assert str(err).startswith(f"{mcp_json}:3: not valid JSON") and err.line == 3

    mcp_json.write_text('{"servers": {}}')
    assert 'an "mcpServers" object' in str(error_of(config))

    mcp_json.write_text(
        '{\n  "mcpServers": {\n    "time": {\n      "command": "uvx"\n    },\n'
        '    "web": {\n      "type": "sse",\n'
        '      "url": "http://localhost:3000/sse"\n    }\n  }\n}\n'
    )
    err = error_of(config)
    assert str(err).startswith(f"mcpServers.web.type at {mcp_json}:7: the SSE transport")
    assert (err.file, err.line) == (str(mcp_json), 7)


def test_server_tools_name_config_servers(tmp_path: Path) -> None:
    servers = "tools:\n  mcp_servers:\n    time: {command: uvx}\n    git: {command: uvx}\n"
    config = load(tmp_path, servers + MODEL + "    server_tools: [time]\n")
    assert config.models[0].server_tools == ["time"]  # type: ignore[attr-defined]
    assert load(tmp_path, MODEL).models[0].server_tools == []  # type: ignore[attr-defined]

    path = write(tmp_path, servers + MODEL + "    server_tools:\n      - time\n      - hass\n")
    err = error_of(path)
    assert (
        f"models[0].server_tools[1] at {path}:9 (model '{HF_ID}'): 'hass' is no MCP server of "
        "tools.mcp_servers (here: time, git)"
    ) in str(err)
    assert err.line == 9

    path = write(
        tmp_path,
        servers
        + MODEL
        + "  - model_path: org/embed\n    model_type: embeddings\n    server_tools: [time]\n",
    )
    assert "server_tools applies to language and vision models" in str(error_of(path))
