"""Lark grammars (llguidance's dialect) for constrained decoding.

The worker compiles them (see ``workers/grammar.py``); here they are only text.
Literals are written with :func:`lit` (a JSON string is a valid Lark string), and
a marker that is a special token of the model is kept as a literal of its own, so
the worker can turn it into a reference to that token. JSON values come from
``%json {schema}`` with fixed separators (``", "`` and ``": "``, as Python's
``json.dumps`` and most chat templates write them) and no other white space, so a
weak model cannot wander off into blank space.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
"""llguidance's JSON options (``x-guidance``) for every embedded schema."""

ANY_OBJECT: dict[str, Any] = {"type": "object"}


def lit(text: str) -> str:
    """``text`` as a Lark literal."""
    return json.dumps(text, ensure_ascii=False)


def json_value(schema: dict[str, Any] | bool | None) -> str:
    """A Lark expression for one JSON value of ``schema`` (``None``/``True``: any object)."""
    if schema is None or schema is True or schema == {}:
        schema = ANY_OBJECT
    if not isinstance(schema, dict):
        raise TypeError("a JSON schema must be an object")
    return "%json " + json.dumps({**schema, "x-guidance": JSON_STYLE}, ensure_ascii=False)


def json_document(schema: dict[str, Any] | None) -> str:
    """The grammar of a whole output that is one JSON value of ``schema``
    (``response_format``: ``json_schema``, or ``json_object`` with ``None``)."""
    return f"start: {json_value(schema)}\n"


def repeated(call_rules: Sequence[str], parallel: bool, separator: str = "") -> str:
    """The ``start`` rule: one of ``call_rules``, or with ``parallel`` one or more
    separated by the literal ``separator``."""
    call = " | ".join(call_rules)
    if not parallel:
        return f"start: {call}\n"
    sep = f"{lit(separator)} " if separator else ""
    return f"start: call ({sep}call)*\ncall: {call}\n"


def choices(schema: Any) -> list[Any] | None:
    """The values an ``enum`` or ``const`` allows (``None``: the schema has neither)."""
    if not isinstance(schema, dict):
        return None
    values = schema.get("enum", [schema["const"]] if "const" in schema else None)
    return values if isinstance(values, list) and values else None


def raw_text(schema: Any, terminal: str, excluded: str, tail: str = "") -> str:
    """A Lark expression for a string parameter written as raw text (no quotes):
    one of its ``enum``/``const`` values, text of its ``minLength``..``maxLength``
    (a regular expression of characters other than ``excluded``), else ``terminal``.

    ``tail``: text that must follow the value (a line break before the closing
    tag). It goes inside the same regular expression: llguidance's lexer takes the
    longest match, so free text followed by a separate ``"\n</tag>"`` literal would
    swallow the line break and never reach the tag."""
    values = choices(schema)
    if values is not None:
        if not all(isinstance(v, str) for v in values):
            raise ValueError("a raw-text parameter's enum must hold strings")
        return "(" + " | ".join(lit(v + tail) for v in values) + ")"
    char = "".join(f"\\x{ord(c):02x}" if ord(c) < 0x80 else c for c in excluded)
    end = "".join(f"\\x{ord(c):02x}" for c in tail)
    low = schema.get("minLength") if isinstance(schema, dict) else None
    high = schema.get("maxLength") if isinstance(schema, dict) else None
    if not isinstance(low, int) and not isinstance(high, int):
        return f"/[^{char}]*{end}/" if tail else terminal
    low = low if isinstance(low, int) and low >= 0 else 0
    bound = f"{low}," + (str(high) if isinstance(high, int) and high >= low else "")
    return f"/[^{char}]{{{bound}}}{end}/"
