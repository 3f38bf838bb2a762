"""``mlx-gateway service install | uninstall | status | logs``."""

from __future__ import annotations

import argparse
import json
import os
import plistlib
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mlx_gateway.supervisor.service import launchd, systemd
from mlx_gateway.supervisor.service.plan import ServiceError, make_plan


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "service",
        help="run the gateway as a login service (launchd on macOS, systemd --user on Linux)",
    )
    actions = parser.add_subparsers(dest="action", required=True)
    install = actions.add_parser("install", help="write the service file and start it")
    install.add_argument("--config", required=True, help="the YAML file the service serves")
    install.add_argument(
        "--no-start", action="store_true", help="only write the files; start nothing"
    )
    uninstall = actions.add_parser("uninstall", help="stop the service and remove its files")
    uninstall.add_argument(
        "--no-start",
        action="store_true",
        help="only remove the files; do not ask the service manager to stop it",
    )
    status = actions.add_parser("status", help="the service's state and the gateway's /health")
    status.add_argument("--config", help="the gateway's YAML file (default: the service's)")
    actions.add_parser("logs", help="follow the service's log")
    for action in (install, uninstall, status):  # for tests: the other system's files
        action.add_argument("--platform", choices=("darwin", "linux"), help=argparse.SUPPRESS)


def _platform(args: Any) -> str:
    chosen = getattr(args, "platform", None) or sys.platform
    return "darwin" if chosen == "darwin" else "linux"


def _run(command: Sequence[str], *, may_fail: bool = False) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        done = subprocess.CompletedProcess(list(command), 127, "", f"{command[0]}: not found")
    except subprocess.TimeoutExpired:
        done = subprocess.CompletedProcess(list(command), 124, "", "no answer in 60 s")
    if done.returncode != 0 and not may_fail:
        why = (done.stderr or done.stdout).strip() or f"exit status {done.returncode}"
        raise ServiceError(f"`{' '.join(command)}` failed: {why}")
    return done


def service_file(platform: str, env: Mapping[str, str]) -> Path:
    return launchd.plist_path(env) if platform == "darwin" else systemd.unit_path(env)


def install(args: Any, env: Mapping[str, str]) -> int:
    platform = _platform(args)
    plan, _config = make_plan(args.config, env)
    path = service_file(platform, env)
    path.parent.mkdir(parents=True, exist_ok=True)
    replaced = path.exists()
    if platform == "darwin":
        launchd.log_dir(env).mkdir(parents=True, exist_ok=True)
        if replaced and not args.no_start:
            _run(launchd.uninstall_commands(path)[0], may_fail=True)  # reinstall: stop the old
        path.write_bytes(launchd.render(plan, env))
        commands = launchd.install_commands(path)
    else:
        path.write_text(systemd.render(plan), encoding="utf-8")
        commands = systemd.install_commands()
    print(f"{'replaced' if replaced else 'wrote'} {path}")
    print(f"it runs: {' '.join(plan.command)}")
    if args.no_start:
        print("not started (--no-start); to start it: " + " && ".join(map(" ".join, commands)))
    else:
        try:
            for command in commands:
                _run(command)
        except ServiceError as exc:
            raise ServiceError(
                f"{exc}. {path} is written; start it once the service manager answers: "
                + " && ".join(map(" ".join, commands))
            ) from None
        print(f"started; the gateway answers on {plan.url} (`mlx-gateway service status`)")
    if platform == "linux":
        print(systemd.HINT)
    return 0


def uninstall(args: Any, env: Mapping[str, str]) -> int:
    platform = _platform(args)
    path = service_file(platform, env)
    if not path.exists():
        print(f"no service is installed ({path} does not exist)")
        return 0
    if not args.no_start:
        stops = (
            launchd.uninstall_commands(path)
            if platform == "darwin"
            else systemd.uninstall_commands()
        )
        for command in stops:
            done = _run(command, may_fail=True)
            if done.returncode != 0:
                print(f"note: `{' '.join(command)}`: {(done.stderr or done.stdout).strip()}")
    path.unlink()
    print(f"removed {path}")
    _remove_if_empty(path.parent, path.parent.parent if platform == "linux" else None)
    if platform == "darwin":
        logs = launchd.log_dir(env)
        if logs.exists():
            shutil.rmtree(logs)
            print(f"removed {logs}")
        _remove_if_empty(logs.parent)
    elif not args.no_start:
        for command in systemd.after_uninstall():
            _run(command, may_fail=True)
    return 0


def _remove_if_empty(*folders: Path | None) -> None:
    """Folders install may have made (``systemd/user``, ``LaunchAgents``, ``Logs``)
    go when nothing else is in them."""
    for folder in folders:
        if folder is not None and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


def installed_config(platform: str, path: Path) -> str | None:
    """The ``--config`` the installed service runs with."""
    if platform == "darwin":
        words = [str(w) for w in plistlib.loads(path.read_bytes()).get("ProgramArguments", [])]
    else:
        words = systemd.exec_start(path.read_text(encoding="utf-8"))
    return words[words.index("--config") + 1] if "--config" in words[:-1] else None


def _state(platform: str) -> str:
    if platform == "darwin":
        done = _run(launchd.state_command(), may_fail=True)
        if done.returncode != 0:
            return "not loaded"
        for line in done.stdout.splitlines():
            if line.strip().startswith("state = "):
                return line.split("=", 1)[1].strip()
        return "loaded"
    done = _run(systemd.state_command(), may_fail=True)
    word = done.stdout.strip()
    return word or f"unknown ({done.stderr.strip() or 'systemctl gave no answer'})"


def _health(url: str) -> tuple[bool, str]:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as response:
            body = json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return False, f"no answer from {url}/health ({getattr(exc, 'reason', exc)})"
    models = body.get("models") if isinstance(body, dict) else None
    count = f", {len(models)} models" if isinstance(models, list | dict) else ""
    return (
        True,
        f"{url}/health: {body.get('status', 'ok') if isinstance(body, dict) else 'ok'}{count}",
    )


def status(args: Any, env: Mapping[str, str]) -> int:
    platform = _platform(args)
    path = service_file(platform, env)
    if not path.exists():
        print(f"not installed ({path} does not exist): `mlx-gateway service install --config …`")
        return 3
    config = args.config or installed_config(platform, path)
    print(f"service file: {path}")
    print(f"config: {config or 'unknown'}")
    print(f"service: {_state(platform)}")
    if config is None:
        return 1
    plan, _ = make_plan(config, env)
    healthy, line = _health(plan.url)
    print(f"gateway: {line}")
    return 0 if healthy else 1


def logs(args: Any, env: Mapping[str, str]) -> int:
    platform = _platform(args)
    command = launchd.logs_command(env) if platform == "darwin" else systemd.logs_command()
    if shutil.which(command[0]) is None:
        raise ServiceError(f"{command[0]} is not installed: cannot follow the service's log")
    sys.stdout.flush()
    os.execvp(command[0], command)


def run(args: Any, env: Mapping[str, str] | None = None) -> int:
    """0 when done; 1 when a step failed (the reason on stderr); 2 for a bad config."""
    from mlx_gateway.supervisor.config import ConfigError

    env = os.environ if env is None else env
    action = {"install": install, "uninstall": uninstall, "status": status, "logs": logs}
    try:
        return action[args.action](args, env)
    except ConfigError as exc:
        print(f"mlx-gateway: configuration error: {exc}", file=sys.stderr)
        return 2
    except (ServiceError, OSError) as exc:
        print(f"mlx-gateway: service {args.action}: {exc}", file=sys.stderr)
        return 1
