"""The upload of the audio endpoints: a multipart form with one audio file, read
within the size limit (:mod:`mlx_gateway.supervisor.http.multipart`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import Request

from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.http.multipart import FORM_OVERHEAD, MIB, read_form


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


async def read_upload(request: Request, limit_mb: float) -> Upload:
    """The form of ``request``, whose file may be at most ``limit_mb`` MiB.

    Raises :class:`BadRequest` for a body that is not a well-formed multipart
    form (or has more than one file), :class:`UploadTooLarge` beyond the limit."""
    form = await read_form(
        request,
        body_limit=int(limit_mb * MIB) + FORM_OVERHEAD,
        too_large=lambda: UploadTooLarge(limit_mb),
        max_files=1,
        file_field="file",
        content="the audio",
    )
    upload = Upload(form.fields)
    for part in form.files:
        upload.file, upload.filename, upload.file_field = part.data, part.filename, part.field
    return upload
