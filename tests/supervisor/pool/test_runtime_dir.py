"""Runtime directories left by killed gateways are removed by the next one, and
nothing else is."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlx_gateway.supervisor.pool.runtime_dir import PREFIX, SOCKET_NAME, remove_stale


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def runtime_dir(root: Path, pid: int, tag: str, *, listening: bool) -> tuple[Path, socket.socket]:
    """A directory like a gateway's, with a Unix socket that listens or not (the
    socket file of a killed process stays, with nobody behind it)."""
    path = root / f"{PREFIX}{pid}-{tag}"
    path.mkdir(mode=0o700)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path / SOCKET_NAME))
    if listening:
        sock.listen()
    else:
        sock.close()
    return path, sock


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A short folder of its own: a Unix socket's path holds at most 107 bytes, which
    pytest's folder under a long TMPDIR (and xdist's ``popen-gw0``) can exceed."""
    short = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp" if os.path.isdir("/tmp") else None))
    try:
        yield short
    finally:
        shutil.rmtree(short, ignore_errors=True)


def test_only_the_leftovers_of_killed_gateways_go(tmp_path: Path) -> None:
    gone = dead_pid()
    stale, _ = runtime_dir(tmp_path, gone, "aaaa", listening=False)
    empty = tmp_path / f"{PREFIX}{gone}-bbbb"
    empty.mkdir()  # killed before it bound its socket
    hidden, listener = runtime_dir(tmp_path, gone, "cccc", listening=True)
    mine, _ = runtime_dir(tmp_path, os.getpid(), "dddd", listening=False)
    alive, _ = runtime_dir(tmp_path, os.getppid(), "eeee", listening=False)
    old_style = tmp_path / f"{PREFIX}x1y2z3"  # no pid in the name: cannot tell
    old_style.mkdir()
    other = tmp_path / f"not-ours-{gone}-ffff"
    other.mkdir()
    try:
        assert remove_stale(tmp_path) == 2
        assert not stale.exists() and not empty.exists()
        # A live listener means a gateway runs there, whatever its pid looks like.
        assert hidden.exists()
        assert mine.exists() and alive.exists() and old_style.exists() and other.exists()
        assert remove_stale(tmp_path) == 0
    finally:
        listener.close()
    assert remove_stale(tmp_path) == 1  # now nobody listens there either
    assert not hidden.exists()
