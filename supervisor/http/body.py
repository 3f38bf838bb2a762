"""Read a JSON request body into a Struct; every failure is a 400 naming the field."""

from __future__ import annotations

import re
from functools import cache
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request

from mlx_gateway.supervisor.errors import BadRequest

T = TypeVar("T")

# msgspec appends the location as " - at `$.a[0].b`"; the root "$" has no suffix.
_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]+)`$")
_BAD_VALUE = re.compile(r"^Invalid value (?P<value>.*)$")
_ROLES = "system, developer, user, assistant, tool"


@cache
def _decoder(type_: Any) -> msgspec.json.Decoder[Any]:
    return msgspec.json.Decoder(type_)


def decode(data: bytes, type_: type[T]) -> T:
    """Decode and validate ``data`` as ``type_``.

    Raises :class:`BadRequest` with ``param`` set to the offending field's path
    (``messages[0].role``) and a message naming it."""
    try:
        wanted: Any = type_  # a type is hashable; functools.cache's stub says otherwise
        decoded: T = _decoder(wanted).decode(data)
        return decoded
    except msgspec.ValidationError as exc:
        raise validation_error(str(exc)) from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"The request body is not valid JSON: {exc}.") from None
    except UnicodeDecodeError as exc:  # bytes that are not UTF-8 inside a JSON string
        raise BadRequest(f"The request body is not valid UTF-8: {exc.reason}.") from None
    except RecursionError:  # msgspec's guard against very deep nesting
        raise BadRequest("The request body is nested too deeply.") from None


def validation_error(text: str) -> BadRequest:
    """Turn a msgspec validation message into a :class:`BadRequest` with a param."""
    match = _AT.match(text)
    assert match is not None  # the pattern matches any string
    what = match["what"]
    # A dict value's path reads "metadata[...]": name the dict.
    path = (match["path"] or "").lstrip(".").replace("[...]", "")
    missing = _MISSING.match(what)
    if missing:
        param = f"{path}.{missing['field']}" if path else missing["field"]
        return BadRequest(f"Missing required parameter: '{param}'.", param=param)
    if not path:
        return BadRequest(f"Invalid request body: {what}.")
    bad_value = _BAD_VALUE.match(what)
    if bad_value:  # a tag (role, part type) outside its choices
        what = f"unsupported value {bad_value['value']}"
        if path.endswith(".role"):
            what += f" (expected one of: {_ROLES})"
    return BadRequest(f"Invalid value for '{path}': {what}.", param=path)


async def read_json(request: Request, type_: type[T]) -> T:
    """Read the whole body of ``request`` and :func:`decode` it as ``type_``."""
    return decode(await request.body(), type_)
