"""macOS: a launchd agent, ``~/Library/LaunchAgents/mlx-gateway.plist``.

``RunAtLoad`` starts it at login, ``KeepAlive`` with ``SuccessfulExit: false``
restarts it after a crash (not after a clean stop), and its output goes to
``~/Library/Logs/mlx-gateway/gateway.log``. A config reload is
``launchctl kill SIGHUP gui/<uid>/mlx-gateway``.
"""

from __future__ import annotations

import os
import plistlib
from collections.abc import Mapping
from pathlib import Path

from mlx_gateway.supervisor.service.plan import NAME, Plan

LABEL = NAME


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or Path.home())


def plist_path(env: Mapping[str, str]) -> Path:
    return _home(env) / "Library" / "LaunchAgents" / f"{LABEL}.plist"


def log_dir(env: Mapping[str, str]) -> Path:
    return _home(env) / "Library" / "Logs" / NAME


def log_file(env: Mapping[str, str]) -> Path:
    return log_dir(env) / "gateway.log"


def render(plan: Plan, env: Mapping[str, str]) -> bytes:
    agent = {
        "Label": LABEL,
        "ProgramArguments": plan.command,
        "WorkingDirectory": str(plan.workdir),
        "EnvironmentVariables": dict(sorted(plan.env.items())),
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": 5,
        "ExitTimeOut": plan.stop_timeout,
        "ProcessType": "Interactive",  # not throttled as a background job
        "StandardOutPath": str(log_file(env)),
        "StandardErrorPath": str(log_file(env)),
    }
    return plistlib.dumps(agent)


def domain() -> str:
    return f"gui/{os.getuid()}"


def install_commands(path: Path) -> list[list[str]]:
    return [["launchctl", "bootstrap", domain(), str(path)]]


def uninstall_commands(path: Path) -> list[list[str]]:
    return [["launchctl", "bootout", domain(), str(path)]]


def state_command() -> list[str]:
    return ["launchctl", "print", f"{domain()}/{LABEL}"]


def logs_command(env: Mapping[str, str]) -> list[str]:
    return ["tail", "-n", "100", "-F", str(log_file(env))]
