"""Linux: a systemd user unit, ``$XDG_CONFIG_HOME/systemd/user/mlx-gateway.service``.

``Restart=on-failure`` brings a crashed gateway back; ``ExecReload`` sends SIGHUP,
which the gateway takes as a reload of its config's models; ``KillMode=mixed``
lets the gateway stop its workers itself (SIGTERM to it alone, SIGKILL to what is
left after ``TimeoutStopSec``).
"""

from __future__ import annotations

import shlex
import shutil
from collections.abc import Mapping
from pathlib import Path

from mlx_gateway.supervisor.service.plan import NAME, Plan

UNIT = f"{NAME}.service"


def unit_path(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME") or Path.home()) / ".config")
    return Path(base) / "systemd" / "user" / UNIT


def _quote(value: str) -> str:
    """A systemd command-line word: double-quoted, ``\\`` and ``"`` escaped, ``$`` and
    ``%`` kept literal."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("%", "%%").replace("$", "$$") + '"'


def _env_line(key: str, value: str) -> str:
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'Environment="{key}={escaped}"'


def exec_start(text: str) -> list[str]:
    """The words of a unit's ``ExecStart`` (as :func:`render` wrote them)."""
    for line in text.splitlines():
        if line.startswith("ExecStart="):
            words = shlex.split(line.removeprefix("ExecStart="))
            return [w.replace("%%", "%").replace("$$", "$") for w in words]
    return []


def render(plan: Plan) -> str:
    kill = shutil.which("kill", path="/bin:/usr/bin") or "/bin/kill"
    lines = [
        "# Written by `mlx-gateway service install`; `mlx-gateway service uninstall` removes it.",
        "[Unit]",
        "Description=mlx-gateway: local MLX models behind the OpenAI API",
        "",
        "[Service]",
        "Type=exec",
        "ExecStart=" + " ".join(_quote(word) for word in plan.command),
        f"ExecReload={kill} -HUP $MAINPID",
        "WorkingDirectory=" + str(plan.workdir).replace("%", "%%"),
        *(_env_line(key, value) for key, value in sorted(plan.env.items())),
        "Restart=on-failure",
        "RestartSec=5",
        "KillMode=mixed",
        f"TimeoutStopSec={plan.stop_timeout}",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ]
    return "\n".join(lines)


def install_commands() -> list[list[str]]:
    return [
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "--now", UNIT],
        ["systemctl", "--user", "restart", UNIT],  # a reinstall runs the new unit
    ]


def uninstall_commands() -> list[list[str]]:
    return [["systemctl", "--user", "disable", "--now", UNIT]]


def after_uninstall() -> list[list[str]]:
    return [["systemctl", "--user", "daemon-reload"]]


def state_command() -> list[str]:
    return ["systemctl", "--user", "is-active", UNIT]


def logs_command() -> list[str]:
    return ["journalctl", "--user", "-u", UNIT, "-n", "100", "-f"]


HINT = (
    "on a machine nobody logs in to, let the service run without a session: "
    "`sudo loginctl enable-linger $USER`"
)
