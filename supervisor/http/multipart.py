"""Read a ``multipart/form-data`` upload (the audio endpoints) within a size limit.

The limit is enforced twice before the body is parsed to the end: a declared
``Content-Length`` over it is refused before anything is read, and the bytes are
counted as they arrive, so a chunked or lying body is cut off at the limit too.
Both answer 413. Starlette's parser keeps the file part in a spooled temporary
file (memory up to 1 MiB, then disk) while the rest of the body arrives.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field

from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from mlx_gateway.supervisor.errors import BadRequest, GatewayError

MIB = 1 << 20
FORM_OVERHEAD = 64 * 1024
"""Bytes allowed beyond the file for the other fields and the part headers."""
MAX_FIELDS = 64


class UploadTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"

    def __init__(self, limit_mb: float) -> None:
        super().__init__(
            f"The uploaded file is too large: the limit is {limit_mb:g} MiB.",
            param="file",
            code="file_too_large",
        )


@dataclass
class Upload:
    """A parsed form: the text fields (every value of a repeated name, in order)
    and the one file, if any."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    file: bytes | None = None
    filename: str = ""
    file_field: str = ""


async def _counted(
    stream: AsyncIterator[bytes], limit: int, limit_mb: float
) -> AsyncGenerator[bytes, None]:
    received = 0
    async for chunk in stream:
        received += len(chunk)
        if received > limit:
            raise UploadTooLarge(limit_mb)
        yield chunk


async def read_upload(request: Request, limit_mb: float) -> Upload:
    """The form of ``request``, whose file may be at most ``limit_mb`` MiB.

    Raises :class:`BadRequest` for a body that is not a well-formed multipart
    form (or has more than one file), :class:`UploadTooLarge` beyond the limit."""
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise BadRequest(
            "The request must be multipart/form-data, with the audio in the 'file' field.",
            param="file",
        )
    body_limit = int(limit_mb * MIB) + FORM_OVERHEAD
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > body_limit:
        raise UploadTooLarge(limit_mb)
    parser = MultiPartParser(
        request.headers,
        _counted(request.stream(), body_limit, limit_mb),
        max_files=1,
        max_fields=MAX_FIELDS,
    )
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise BadRequest(f"The multipart form cannot be read: {exc.message}") from None
    upload = Upload()
    try:
        for name, value in form.multi_items():
            if isinstance(value, UploadFile):
                upload.file = await value.read()
                upload.filename = value.filename or ""
                upload.file_field = name
            else:
                upload.fields.setdefault(name, []).append(value)
    finally:
        await form.close()
    return upload
