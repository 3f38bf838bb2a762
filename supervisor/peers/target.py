"""The model a request body names: the ``model`` field of a JSON body, or the
``model`` field of a multipart form (the audio and image-edit uploads)."""

from __future__ import annotations

from typing import Any

import msgspec


class _Named(msgspec.Struct):
    model: Any = None


_decoder = msgspec.json.Decoder(_Named)


class _Continues(msgspec.Struct):
    previous_response_id: Any = None


_continues = msgspec.json.Decoder(_Continues)


def previous_response_of(body: bytes) -> str | None:
    """The ``previous_response_id`` of a Responses API body (``None``: none, or a
    body that cannot be read: the handler explains that)."""
    try:
        named = _continues.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    value = named.previous_response_id
    return value if isinstance(value, str) and value else None


def model_of(content_type: str, body: bytes) -> str | None:
    """The model named by ``body``; ``None`` when it names none or cannot be read
    (the handler that serves it then explains what is wrong)."""
    kind, _, params = content_type.partition(";")
    kind = kind.strip().lower()
    if kind == "multipart/form-data":
        return _form_model(params, body)
    try:
        named = _decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return named.model if isinstance(named.model, str) else None


def _boundary(params: str) -> bytes | None:
    for param in params.split(";"):
        key, _, value = param.strip().partition("=")
        if key.strip().lower() == "boundary" and value:
            return value.strip().strip('"').encode("latin-1")
    return None


def _form_model(params: str, body: bytes) -> str | None:
    """Walk the parts by their boundaries, reading only each part's headers (a file
    part's bytes are never copied or searched)."""
    boundary = _boundary(params)
    if boundary is None:
        return None
    delimiter = b"--" + boundary
    start = body.find(delimiter)
    while start != -1:
        headers_at = start + len(delimiter)
        if body.startswith(b"--", headers_at):  # the closing delimiter
            return None
        end_of_headers = body.find(b"\r\n\r\n", headers_at)
        if end_of_headers == -1:
            return None
        following = body.find(b"\r\n" + delimiter, end_of_headers)
        if following == -1:
            return None
        headers = body[headers_at:end_of_headers].decode("latin-1").lower()
        if _names_model(headers):
            value = body[end_of_headers + 4 : following]
            return value.decode("utf-8", "replace").strip() or None
        start = following + 2
    return None


def _names_model(headers: str) -> bool:
    for line in headers.split("\r\n"):
        name, _, value = line.partition(":")
        if name.strip() != "content-disposition":
            continue
        fields = [part.strip() for part in value.split(";")]
        return 'name="model"' in fields or "name=model" in fields
    return False
