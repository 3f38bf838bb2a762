"""The error context of one load: the file, its folder, key positions, and how a
problem becomes a :class:`ConfigError` that names the key, the line and the fix."""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mlx_gateway.supervisor.config.errors import ConfigError
from mlx_gateway.supervisor.config.yaml_positions import _KeyPath, _Pos

# --------------------------------------------------------------------------- helpers

_DURATION_RE = re.compile(
    r"^\s*(?:(?P<h>\d+(?:\.\d+)?)\s*h)?\s*(?:(?P<m>\d+(?:\.\d+)?)\s*m(?:in)?)?"
    r"\s*(?:(?P<s>\d+(?:\.\d+)?)\s*s)?\s*$",
    re.IGNORECASE,
)


def _parse_duration(text: str) -> float | None:
    """Seconds in ``"300"``, ``"90s"``, ``"5m"``, ``"1h30m"``; ``None`` if not one."""
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        return value if math.isfinite(value) else None
    match = _DURATION_RE.match(text)
    if match is None or not any(match.groupdict().values()):
        return None
    hours, minutes, seconds = (float(match.group(g) or 0) for g in ("h", "m", "s"))
    return hours * 3600 + minutes * 60 + seconds


def _show(value: Any) -> str:
    """A value as the user would recognize it from YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return str(value)


def _suggest(key: str, candidates: Iterable[str]) -> str | None:
    matches = difflib.get_close_matches(key, sorted(candidates), n=1, cutoff=0.6)
    return matches[0] if matches else None


def _display(path: _KeyPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class _Ctx:
    """Where values came from, to turn a key path into ``file:line`` and a label."""

    def __init__(self, file: str | None, base_dir: Path, positions: dict[_KeyPath, _Pos]):
        self.file = file
        self.base_dir = base_dir
        self.positions = positions
        # normalized path → (path as the user wrote it, its position in the file)
        self.origin: dict[_KeyPath, tuple[_KeyPath, _Pos | None]] = {}
        self.labels: dict[int, str] = {}

    def track(self, normalized: _KeyPath, written: _KeyPath) -> None:
        self.origin[normalized] = (written, self.positions.get(written))

    def locate(self, path: _KeyPath) -> tuple[_KeyPath, _Pos | None]:
        """The written path and position for ``path``, or for its closest parent."""
        for cut in range(len(path), -1, -1):
            prefix = path[:cut]
            if prefix in self.origin:
                written, pos = self.origin[prefix]
                return (*written, *path[cut:]), pos
            if prefix in self.positions:
                return path, self.positions[prefix]
        return path, None

    def where(self, pos: _Pos | None, *, key: bool = False) -> str:
        if self.file is None:
            return ""
        if pos is None:
            return f" in {self.file}"
        return f" at {self.file}:{pos.key_line if key else pos.value_line}"

    def model_index(self, path: _KeyPath) -> int | None:
        if len(path) >= 2 and path[0] == "models" and isinstance(path[1], int):
            return path[1]
        return None

    def error(
        self, path: _KeyPath, problem: str, *, key: bool = False, as_written: bool = False
    ) -> ConfigError:
        """``models[0].idle_timeout at config.yaml:7 (model 'qwen'): <problem>``.

        ``path`` is in our schema unless ``as_written`` (then it is the file's own).
        """
        if as_written:
            written, pos = path, self.positions.get(path)
        else:
            written, pos = self.locate(path)
        index = self.model_index(path)
        label = f" (model {self.labels[index]!r})" if index in self.labels else ""
        text = _display(written) or "config"
        line = (pos.key_line if key else pos.value_line) if pos else None
        return ConfigError(
            f"{text}{self.where(pos, key=key)}{label}: {problem}",
            file=self.file,
            line=line,
            key=_display(written) or None,
            model_index=index,
        )


def _duration(ctx: _Ctx, path: _KeyPath, value: Any) -> Any:
    """A duration key's value as seconds; strings like ``5m`` are accepted."""
    if not isinstance(value, str):
        return value  # numbers (and wrong types) go on to msgspec
    seconds = _parse_duration(value)
    if seconds is None:
        raise ctx.error(
            path,
            f"expected a number, got {_show(value)}; give seconds (300) or a duration "
            "such as '90s', '5m' or '1h30m'",
        )
    return seconds
