"""msgspec conversion, with its error path (``$.models[1].temperature``) turned back
into the key the user wrote and its line."""

from __future__ import annotations

import re
from typing import Any

import msgspec

from mlx_gateway.supervisor.config.context import _Ctx, _show
from mlx_gateway.supervisor.config.schema import LOG_LEVELS
from mlx_gateway.supervisor.config.yaml_positions import _T, _KeyPath

# --------------------------------------------------------------------------- convert

_MSGSPEC_RE = re.compile(r"^(?P<msg>.*?)(?: - at `(?P<path>\$[^`]*)`)?$", re.DOTALL)
_EXPECTED_RE = re.compile(
    r"^Expected `(?P<types>[^`]+)`(?P<length> of length)?(?: (?P<op>>=|<=|>|<) (?P<bound>\S+))?"
    r"(?:, got `(?P<got>[^`]+)`)?$"
)
_PATH_PART_RE = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "true or false",
    "array": "a list",
    "object": "a mapping",
}
_TYPE_HINTS = {
    "array": "write a YAML list, e.g. [a, b]",
    "bool": "write true or false",
    "str": "quote the value",
}


def _msgspec_path(text: str | None) -> _KeyPath:
    if not text:
        return ()
    return tuple(name if name else int(number) for name, number in _PATH_PART_RE.findall(text[1:]))


def _lookup(data: Any, path: _KeyPath) -> Any:
    for part in path:
        try:
            data = data[part]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def _number(text: str) -> str:
    try:
        value = float(text)
    except ValueError:
        return text
    return str(int(value)) if value.is_integer() else text


def _convert(ctx: _Ctx, data: dict[str, Any], into: type[_T], at: _KeyPath = ()) -> _T:
    """``msgspec.convert`` whose errors name the key as written and its line."""
    try:
        return msgspec.convert(data, into)
    except msgspec.ValidationError as exc:
        match = _MSGSPEC_RE.match(str(exc))
        assert match is not None  # the pattern matches any text
        path = _msgspec_path(match.group("path"))
        value = _lookup(data, path)
        raise ctx.error((*at, *path), _explain(match.group("msg"), path, value)) from None


def _explain(message: str, path: _KeyPath, value: Any) -> str:
    """A msgspec validation message in the words of the YAML file."""
    if (m := _EXPECTED_RE.match(message)) is not None:
        types = [t for t in m.group("types").split(" | ") if t != "null"] or ["null"]
        words = " or ".join(_TYPE_WORDS.get(t, t) for t in types)
        if m.group("length"):
            what = "string" if types == ["str"] else "list"
            if m.group("op") in ("<", "<="):
                items = "characters" if what == "string" else "items"
                return f"expected a {what} of at most {m.group('bound')} {items}"
            return f"expected a non-empty {what}"
        if m.group("op"):
            return (
                f"expected {words} {m.group('op')} {_number(m.group('bound'))}, got {_show(value)}"
            )
        hint = _TYPE_HINTS.get(types[0]) if len(types) == 1 and value is not None else None
        return f"expected {words}, got {_show(value)}" + (f"; {hint}" if hint else "")
    if message.startswith("Invalid enum value"):
        allowed = ", ".join(LOG_LEVELS) if path[-1:] == ("log_level",) else None
        return f"{_show(value)} is not allowed" + (f"; use one of: {allowed}" if allowed else "")
    if (m := re.match(r"Object missing required field `(.+)`", message)) is not None:
        return f"missing required key '{m.group(1)}'"
    return message
