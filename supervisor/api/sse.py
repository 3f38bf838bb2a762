"""Server-sent events framing for OpenAI streams.

Each event is one ``data:`` line holding compact JSON (which never contains a raw
newline), ended by a blank line. Streams end with ``data: [DONE]``.
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


def comment(text: str = "") -> bytes:
    """A comment event (``: text``), ignored by clients: a keep-alive."""
    lines = text.splitlines() or [""]
    return ("".join(f": {line}\n" for line in lines) + "\n").encode()
