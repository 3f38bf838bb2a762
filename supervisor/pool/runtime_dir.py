"""The gateway's private runtime directory (its ZeroMQ socket lives there), and the
removal of the ones that killed gateways left behind.

A gateway removes its directory when it exits, but ``kill -9`` (or a power cut)
skips that. Each directory is named after the gateway's pid, so a later gateway
can tell the leftovers: a directory is removed only when that pid no longer runs
*and* nothing listens on its socket (the second check keeps a gateway whose pid
another pid namespace hides, say in a container sharing ``/tmp``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import psutil

log = logging.getLogger("mlx_gateway.registry")

PREFIX = "mlx-gateway-"
SOCKET_NAME = "gateway.sock"


def make_runtime_dir(configured: str | None) -> tuple[Path, bool]:
    """A directory only this user can enter, for the ZeroMQ socket.

    Returns the path and whether we created it (and so remove it at exit)."""
    if configured:
        path = Path(configured).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o700)
        return path, False
    root = Path(tempfile.gettempdir())
    removed = remove_stale(root)
    if removed:
        log.info("removed %d runtime folder(s) left by gateways that were killed", removed)
    # mkdtemp makes it 0700
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root)), True


def remove_stale(root: Path) -> int:
    """Remove this user's runtime directories under ``root`` whose gateway is gone;
    returns how many."""
    removed = 0
    for path in root.glob(f"{PREFIX}*-*"):
        pid = _pid_of(path.name)
        if pid is None or pid == os.getpid() or psutil.pid_exists(pid):
            continue
        try:
            info = path.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue
        if _listening(path / SOCKET_NAME):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    return removed


def _pid_of(name: str) -> int | None:
    """``mlx-gateway-<pid>-<random>`` → pid (``None`` for other names)."""
    pid, sep, _ = name[len(PREFIX) :].partition("-")
    if not sep or not pid.isdigit():
        return None
    return int(pid)


def _listening(path: Path) -> bool:
    """Whether a process accepts connections on the Unix socket at ``path``."""
    if not path.is_socket():
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(str(path))
    except OSError:
        return False
    else:
        return True
    finally:
        with contextlib.suppress(OSError):
            probe.close()
