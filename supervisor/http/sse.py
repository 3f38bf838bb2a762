"""Server-sent events framing for OpenAI streams.

Each event is one ``data:`` line holding compact JSON (which never contains a raw
newline), ended by a blank line, maybe after an ``event:`` line naming it
(:func:`named`). OpenAI's chat streams end with ``data: [DONE]``.
"""

from __future__ import annotations

from typing import Any

import msgspec

_encoder = msgspec.json.Encoder()

DONE = b"data: [DONE]\n\n"
"""The OpenAI end-of-stream marker."""


def data(obj: Any) -> bytes:
    """One ``data: <json>`` event; ``obj`` is a Struct or builtins."""
    buf = bytearray(b"data: ")
    _encoder.encode_into(obj, buf, 6)
    buf += b"\n\n"
    return bytes(buf)


HOLE = "\x00mlx-gateway-hole\x00"
"""The placeholder string a :class:`Template` is built around."""


class Template:
    """An event encoded once, with one string field left open.

    Build it from the event object holding :data:`HOLE` where the text goes;
    :meth:`fill` then only encodes the new text between the two fixed halves, so a
    stream's per-token event costs one small string encoding instead of building
    and encoding the whole response object. The bytes equal those of
    ``data(obj)`` with the text in place of the hole."""

    __slots__ = ("_head", "_tail")

    def __init__(self, obj: Any) -> None:
        whole = data(obj)
        hole = _encoder.encode(HOLE)
        if whole.count(hole) != 1:
            raise ValueError("a Template needs exactly one HOLE in its object")
        self._head, _, self._tail = whole.partition(hole)

    def fill(self, text: str) -> bytes:
        return self._head + _encoder.encode(text) + self._tail


def named(kind: str, obj: Any) -> bytes:
    """One event with its ``event:`` name (the Responses and Anthropic streams)."""
    return b"event: " + kind.encode() + b"\ndata: " + _encoder.encode(obj) + b"\n\n"


def comment(text: str = "") -> bytes:
    """A comment event (``: text``), ignored by clients: a keep-alive."""
    lines = text.splitlines() or [""]
    return ("".join(f": {line}\n" for line in lines) + "\n").encode()
