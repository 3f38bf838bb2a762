"""``mlx-gateway service``: the systemd unit and the launchd plist it writes, with a
temporary HOME and XDG_CONFIG_HOME. Each file parses, names absolute paths that
exist, and what it runs is run here as the service manager would run it (its
command, environment and folder): the gateway answers ``/health``, and the
reload the file declares (systemd's ``ExecReload``, launchd's SIGHUP) reloads the
config's models. Install then uninstall leaves the folders as they were.

A service manager itself is only asked where it is there: ``systemd-analyze
verify`` checks the unit when installed, and the start through a real user
systemd runs only with ``MLX_GATEWAY_TEST_USER_SYSTEMD=1`` (it installs into the
user's own systemd).
"""

from __future__ import annotations

import os
import plistlib
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from mlx_gateway.supervisor.cli import build_parser
from mlx_gateway.supervisor.service.cli import run

from ...e2e.gateway import free_port

pytestmark = pytest.mark.slow

MODEL = {"model_path": "mlx-community/Qwen3-0.6B-4bit", "served_model_name": "first"}
ADDED = {"model_path": "mlx-community/Llama-3.2-1B-Instruct-4bit", "served_model_name": "added"}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        "HOME": str(tmp_path / "home"),
        "XDG_CONFIG_HOME": str(tmp_path / "home" / ".config"),
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "MLX_GATEWAY_CACHE_DIR": str(tmp_path / "cache"),
        "PATH": os.environ["PATH"],
    }


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "my config" / "gateway.yaml"  # a space: quoting matters
    path.parent.mkdir()
    write_config(path, free_port(), [MODEL])
    return path


def write_config(path: Path, port: int, models: list[dict[str, Any]]) -> None:
    server = {"host": "127.0.0.1", "port": port, "shutdown_grace": 1}
    path.write_text(yaml.safe_dump({"server": server, "models": models}))


def service(env: dict[str, str], *argv: str) -> int:
    return run(build_parser().parse_args(["service", *argv]), env)


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def unit_fields(text: str) -> dict[str, list[str]]:
    """Every ``Key=value`` of a unit file (keys may repeat), by ``Section.Key``."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in text.splitlines():
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out.setdefault(f"{section}.{key}", []).append(value)
    return out


class Running:
    """The gateway started from a service file's command, environment and folder."""

    def __init__(self, command: list[str], env: dict[str, str], cwd: str, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        self.wait_until(lambda: httpx.get(f"{self.url}/health", timeout=1).status_code == 200)

    def wait_until(self, check: Any, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, self.output()
            try:
                if check():
                    return
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, self.output()
            time.sleep(0.1)

    def models(self) -> list[str]:
        return [m["id"] for m in httpx.get(f"{self.url}/v1/models", timeout=5).json()["data"]]

    def output(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        assert self.proc.stdout is not None
        return self.proc.stdout.read().decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def cleanup() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for gateway in started:
        gateway.stop()


def test_systemd_unit_runs_reloads_and_uninstalls(
    env: dict[str, str], config: Path, cleanup: list[Running], capsys: Any
) -> None:
    home = Path(env["HOME"])
    (home / ".config").mkdir(parents=True)  # as any home has it
    before = tree(home)
    assert (
        service(env, "install", "--config", str(config), "--no-start", "--platform", "linux") == 0
    )
    unit = home / ".config" / "systemd" / "user" / "mlx-gateway.service"
    out = capsys.readouterr().out
    assert f"wrote {unit}" in out and "loginctl enable-linger" in out
    text = unit.read_text()
    fields = unit_fields(text)
    assert fields["Service.Restart"] == ["on-failure"]
    assert fields["Install.WantedBy"] == ["default.target"]
    from mlx_gateway.supervisor.service.systemd import exec_start

    command = exec_start(text)
    assert Path(command[0]).is_absolute() and os.access(command[0], os.X_OK)
    assert command[1:] == ["launch", "--config", str(config)] and config.exists()
    environment = dict(v.strip('"').split("=", 1) for v in fields["Service.Environment"])
    assert environment["HF_HUB_OFFLINE"] == "1" and environment["HF_HOME"] == env["HF_HOME"]
    (reload,) = fields["Service.ExecReload"]
    assert reload.endswith(" -HUP $MAINPID") and Path(reload.split()[0]).is_absolute()
    if shutil.which("systemd-analyze"):
        # It exits 0 on a line it cannot parse, and says so: ours gets no remark at all.
        verify = subprocess.run(
            ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False
        )
        assert (verify.returncode, verify.stderr) == (0, ""), verify.stderr
        broken = unit.with_name("broken.service")
        broken.write_text(text.replace("Type=exec", "Type=sometimes"))
        verify = subprocess.run(
            ["systemd-analyze", "verify", str(broken)], capture_output=True, text=True, check=False
        )
        assert "Failed to parse service type" in verify.stderr
        broken.unlink()

    # What systemd would run: that command, that environment, that folder.
    port = yaml.safe_load(config.read_text())["server"]["port"]
    gateway = Running(command, environment, fields["Service.WorkingDirectory"][0], port)
    cleanup.append(gateway)
    assert gateway.models() == ["first"]
    assert service(env, "status", "--platform", "linux") == 0  # the gateway answers /health
    assert f"gateway: {gateway.url}/health: ok" in capsys.readouterr().out
    write_config(config, port, [MODEL, ADDED])
    reload_command = reload.replace("$MAINPID", str(gateway.proc.pid)).split()
    subprocess.run(reload_command, check=True)
    gateway.wait_until(lambda: gateway.models() == ["first", "added"])
    gateway.stop()

    # Reinstalling replaces the one file; uninstall leaves nothing behind.
    assert (
        service(env, "install", "--config", str(config), "--no-start", "--platform", "linux") == 0
    )
    assert f"replaced {unit}" in capsys.readouterr().out
    assert service(env, "uninstall", "--no-start", "--platform", "linux") == 0
    assert tree(home) == before
    assert service(env, "status", "--platform", "linux") == 3


def test_launchd_plist_runs_reloads_and_uninstalls(
    env: dict[str, str], config: Path, cleanup: list[Running]
) -> None:
    home = Path(env["HOME"])
    (home / "Library").mkdir(parents=True)  # as any home on a Mac has it
    before = tree(home)
    argv = ("install", "--config", str(config), "--no-start", "--platform", "darwin")
    assert service(env, *argv) == 0
    plist = home / "Library" / "LaunchAgents" / "mlx-gateway.plist"
    agent = plistlib.loads(plist.read_bytes())
    assert agent["Label"] == "mlx-gateway" and agent["RunAtLoad"] is True
    assert agent["KeepAlive"] == {"SuccessfulExit": False}  # restarted after a crash only
    logs = home / "Library" / "Logs" / "mlx-gateway"
    assert agent["StandardOutPath"] == agent["StandardErrorPath"] == str(logs / "gateway.log")
    assert logs.is_dir()
    command = agent["ProgramArguments"]
    assert Path(command[0]).is_absolute() and os.access(command[0], os.X_OK)
    assert command[1:] == ["launch", "--config", str(config)]
    assert agent["EnvironmentVariables"]["HF_HUB_OFFLINE"] == "1"

    port = yaml.safe_load(config.read_text())["server"]["port"]
    gateway = Running(command, agent["EnvironmentVariables"], agent["WorkingDirectory"], port)
    cleanup.append(gateway)
    write_config(config, port, [MODEL, ADDED])
    gateway.proc.send_signal(signal.SIGHUP)  # what `launchctl kill SIGHUP` sends
    gateway.wait_until(lambda: gateway.models() == ["first", "added"])
    gateway.stop()

    assert service(env, "uninstall", "--no-start", "--platform", "darwin") == 0
    assert tree(home) == before


def test_a_broken_config_writes_nothing(env: dict[str, str], tmp_path: Path, capsys: Any) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: []\n")
    assert service(env, "install", "--config", str(bad), "--no-start", "--platform", "linux") == 2
    assert "configuration error" in capsys.readouterr().err
    assert not Path(env["HOME"]).exists()


@pytest.mark.skipif(
    os.environ.get("MLX_GATEWAY_TEST_USER_SYSTEMD") != "1",
    reason="installs into this user's own systemd: set MLX_GATEWAY_TEST_USER_SYSTEMD=1",
)
def test_user_systemd_starts_the_service(config: Path) -> None:
    env = dict(os.environ)
    port = yaml.safe_load(config.read_text())["server"]["port"]
    assert service(env, "install", "--config", str(config)) == 0
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the service never answered /health"
            time.sleep(0.2)
        assert service(env, "status") == 0
    finally:
        assert service(env, "uninstall") == 0
