"""Read a ``multipart/form-data`` body within a size limit: the one form reader of
the upload endpoints (audio transcriptions and translations, image edits).

The limit is enforced twice before the body is parsed to the end: a declared
``Content-Length`` over it is refused before anything is read, and the bytes are
counted as they arrive, so a chunked or lying body is cut off at the limit too.
Both raise the caller's "too large" error (a 413). Starlette's parser keeps each
file part in a spooled temporary file (memory up to 1 MiB, then disk) while the
rest of the body arrives.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from mlx_gateway.supervisor.errors import BadRequest, GatewayError

MIB = 1 << 20
FORM_OVERHEAD = 64 * 1024
"""Bytes allowed beyond the files for the text fields and the part headers."""
MAX_FIELDS = 64


@dataclass
class FormFile:
    """One file part: its field name, the file name the client gave and the bytes."""

    field: str
    filename: str
    data: bytes


@dataclass
class Form:
    """A parsed form: the text fields (every value of a repeated name, in order) and
    the files, in the order they came."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    files: list[FormFile] = field(default_factory=list)


async def _counted(
    stream: AsyncIterator[bytes], limit: int, too_large: Callable[[], GatewayError]
) -> AsyncGenerator[bytes, None]:
    received = 0
    async for chunk in stream:
        received += len(chunk)
        if received > limit:
            raise too_large()
        yield chunk


async def read_form(
    request: Request,
    *,
    body_limit: int,
    too_large: Callable[[], GatewayError],
    max_files: int,
    file_field: str,
    content: str,
) -> Form:
    """The form of ``request``, a body of at most ``body_limit`` bytes with at most
    ``max_files`` files.

    Raises :class:`BadRequest` for a body that is not a well-formed multipart form
    (the message asks for ``content`` in the ``file_field`` field) or has too many
    files or fields, and ``too_large()`` beyond the limit."""
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise BadRequest(
            f"The request must be multipart/form-data, with {content} in the '{file_field}' field.",
            param=file_field,
        )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > body_limit:
        raise too_large()
    parser = MultiPartParser(
        request.headers,
        _counted(request.stream(), body_limit, too_large),
        max_files=max_files,
        max_fields=MAX_FIELDS,
    )
    try:
        parsed = await parser.parse()
    except MultiPartException as exc:
        raise BadRequest(f"The multipart form cannot be read: {exc.message}") from None
    form = Form()
    try:
        for name, value in parsed.multi_items():
            if isinstance(value, UploadFile):
                form.files.append(FormFile(name, value.filename or "", await value.read()))
            else:
                form.fields.setdefault(name, []).append(value)
    finally:
        await parsed.close()
    return form
