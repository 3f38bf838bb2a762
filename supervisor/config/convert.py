"""msgspec conversion, with its error path (``$.models[1].temperature``) turned back
into the key the user wrote and its line."""

from __future__ import annotations

import re
from collections.abc import Sequence
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgspec
import msgspec.inspect
import msgspec.structs

from mlx_gateway.protocol.kinds import describe_model_types
from mlx_gateway.supervisor.config.context import _Ctx, _show
from mlx_gateway.supervisor.config.errors import ConfigError
from mlx_gateway.supervisor.config.kinds import entry_type, model_types_taking
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
        message = match.group("msg")
        if (wrong := _wrong_kind(ctx, (*at, *path), message, _lookup(data, path))) is not None:
            raise wrong from None
        value = _lookup(data, path)
        entry = _lookup(data, path[:-1])
        problem = _explain(message, path, value, _choices(into, path))
        problem += _taken_elsewhere((*at, *path), value, entry)
        raise ctx.error((*at, *path), problem) from None


def _taken_elsewhere(path: _KeyPath, value: Any, entry: Any) -> str:
    """For a model entry's value its kind refuses: the kinds that would take it
    (``context_length: auto`` on an embeddings model)."""
    if len(path) != 3 or path[0] != "models" or not isinstance(path[2], str):
        return ""
    key = path[2]
    fits = tuple(
        model_type
        for model_type in model_types_taking(key)
        if _accepts(entry_type(model_type), key, value)
    )
    if not fits:
        return ""
    model_type = entry.get("model_type") if isinstance(entry, dict) else None
    return (
        f"; {key}: {_show(value)} applies to {describe_model_types(fits)} only, and this "
        f"entry's model_type is {model_type!r}"
    )


def _accepts(struct: type, key: str, value: Any) -> bool:
    try:
        msgspec.convert({"model_path": "-", key: value}, struct)
    except msgspec.ValidationError:
        return False
    return True


def _wrong_kind(ctx: _Ctx, entry: _KeyPath, message: str, fields: Any) -> ConfigError | None:
    """A model entry's key that its kind's Struct lacks: which kinds take it."""
    found = re.match(r"Object contains unknown field `(.+)`$", message)
    if found is None or ctx.model_index(entry) is None or len(entry) != 2:
        return None
    key = found.group(1)
    model_type = fields.get("model_type") if isinstance(fields, dict) else None
    written, _ = ctx.locate((*entry, key))
    return ctx.error(
        (*entry, key),
        f"{written[-1]} applies to {describe_model_types(model_types_taking(key))} only, and "
        f"this entry's model_type is {model_type!r}; remove it (docs/configuration.md lists "
        "the keys of each kind)",
        key=True,
    )


def _choices(into: Any, path: _KeyPath) -> list[Any]:
    """The values a ``Literal`` key at ``path`` of ``into`` allows, in the order the
    schema lists them (empty: none found)."""
    options = [into]
    for part in path:
        options = [t for o in options for t in _members(o)]
        nxt = []
        for option in options:
            if isinstance(part, str) and msgspec.inspect.is_struct_type(option):
                fields = msgspec.structs.fields(option)
                nxt += [f.type for f in fields if f.encode_name == part]
            elif isinstance(part, int) and get_origin(option) is list:
                nxt += list(get_args(option)[:1])
            elif isinstance(part, str) and get_origin(option) is dict:
                nxt += list(get_args(option)[1:2])
        options = nxt
    members = [t for o in options for t in _members(o)]
    return list(dict.fromkeys(v for t in members if get_origin(t) is Literal for v in get_args(t)))


def _members(annotation: Any) -> list[Any]:
    """``annotation`` without ``Annotated`` and ``Optional``, a union as its members."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _members(get_args(annotation)[0])
    if origin is Union or isinstance(annotation, UnionType):
        return [t for a in get_args(annotation) for t in _members(a)]
    return [] if annotation is type(None) else [annotation]


def _explain(message: str, path: _KeyPath, value: Any, choices: Sequence[Any] = ()) -> str:
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
        allowed = ", ".join(str(c) for c in choices) or None
        return f"{_show(value)} is not allowed" + (f"; use one of: {allowed}" if allowed else "")
    if (m := re.match(r"Object missing required field `(.+)`", message)) is not None:
        return f"missing required key '{m.group(1)}'"
    return message
