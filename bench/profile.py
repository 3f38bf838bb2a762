"""Sampling profiles of running processes with py-spy, summarized as text.

``py-spy record --format raw`` writes collapsed stacks (``frame;frame;… count``).
The summary lists where the samples were: per function, the share of samples in
which it was on the stack (inclusive) and at the top of it (self).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

_LOCATION = re.compile(r" \((?P<file>[^()]*):\d+\)$")


def py_spy() -> str | None:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return found if Path(found).exists() else None


class Recording:
    """``py-spy record`` attached to ``pid`` until :meth:`stop`."""

    def __init__(self, pid: int, out: Path, rate: int = 250, idle: bool = False) -> None:
        command = py_spy()
        if command is None:
            raise RuntimeError("py-spy is not installed (it is in the dev dependency group)")
        self.out = out
        argv = [command, "record", "--pid", str(pid), "--rate", str(rate)]
        argv += ["--format", "raw", "--output", str(out), "--nonblocking"]
        if idle:
            argv.append("--idle")
        self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self) -> str:
        """Stop sampling (SIGINT makes py-spy write its file) and return its stderr."""
        self._proc.send_signal(2)
        try:
            _, err = self._proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            _, err = self._proc.communicate()
        return err.decode(errors="replace")


def _short(frame: str) -> str:
    """``func (path/to/module.py:12)`` → ``func (module.py)``."""
    match = _LOCATION.search(frame)
    if match is None:
        return frame
    name = frame[: match.start()]
    return f"{name} ({Path(match.group('file')).name})"


def summarize(collapsed: Path, top: int = 15) -> str:
    """A text table of the hottest functions of a raw py-spy recording."""
    inclusive: Counter[str] = Counter()
    self_time: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        self_time[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    if total == 0:
        return "(no samples)"
    rows = [f"{total} samples", "", "  self%  incl%  function"]
    for frame, count in self_time.most_common(top):
        rows.append(f"  {100 * count / total:5.1f}  {100 * inclusive[frame] / total:5.1f}  {frame}")
    rows += ["", "  incl%  function (on the stack)"]
    for frame, count in inclusive.most_common(top):
        rows.append(f"  {100 * count / total:5.1f}  {frame}")
    return "\n".join(rows)
