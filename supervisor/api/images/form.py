"""Read the ``multipart/form-data`` body of ``/v1/images/edits`` within a size limit.

The form carries text fields and files: ``image`` (or ``image[]``, repeated, as the
OpenAI SDK sends a list) and an optional ``mask``. The body is bounded before it is
parsed to the end: a declared ``Content-Length`` over the limit is refused before
anything is read, and the bytes are counted as they arrive, so a chunked or lying
body is cut off too. Both answer 413.
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
"""Bytes allowed beyond the files for the text fields and the part headers."""
MAX_FILES = 17
MAX_FIELDS = 64
IMAGE_FIELDS = ("image", "image[]")


class ImageTooLarge(GatewayError):
    status = 413
    type = "invalid_request_error"

    def __init__(self, limit: int, param: str = "image") -> None:
        super().__init__(
            f"The uploaded image is too large: the limit is {limit / MIB:g} MiB per file.",
            param=param,
            code="file_too_large",
        )


@dataclass
class EditForm:
    """A parsed edit form: text fields (every value of a name, in order), the input
    images in order and the mask, if any."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    images: list[bytes] = field(default_factory=list)
    mask: bytes | None = None

    def check_sizes(self, limit: int) -> None:
        """413 unless every file is at most ``limit`` bytes; 400 for an empty one."""
        named = [("image", data) for data in self.images]
        if self.mask is not None:
            named.append(("mask", self.mask))
        for name, data in named:
            if not data:
                raise BadRequest(f"The uploaded '{name}' file is empty.", param=name)
            if len(data) > limit:
                raise ImageTooLarge(limit, name)


async def _counted(
    stream: AsyncIterator[bytes], limit: int, file_limit: int
) -> AsyncGenerator[bytes, None]:
    received = 0
    async for chunk in stream:
        received += len(chunk)
        if received > limit:
            raise ImageTooLarge(file_limit)
        yield chunk


async def read_edit_form(request: Request, file_limit: int, max_images: int) -> EditForm:
    """The form of ``request``: at most ``max_images`` images and a mask, each at
    most ``file_limit`` bytes (the body as a whole is bounded by their sum).

    Raises :class:`BadRequest` for a body that is not a well-formed multipart form
    or a file under another name, :class:`ImageTooLarge` beyond the limit."""
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise BadRequest(
            "The request must be multipart/form-data, with the picture in the 'image' field.",
            param="image",
        )
    body_limit = file_limit * (max_images + 1) + FORM_OVERHEAD
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > body_limit:
        raise ImageTooLarge(file_limit)
    parser = MultiPartParser(
        request.headers,
        _counted(request.stream(), body_limit, file_limit),
        max_files=MAX_FILES,
        max_fields=MAX_FIELDS,
    )
    try:
        form = await parser.parse()
    except MultiPartException as exc:
        raise BadRequest(f"The multipart form cannot be read: {exc.message}") from None
    out = EditForm()
    try:
        for name, value in form.multi_items():
            if not isinstance(value, UploadFile):
                out.fields.setdefault(name, []).append(value)
            elif name in IMAGE_FIELDS:
                out.images.append(await value.read())
            elif name == "mask":
                if out.mask is not None:
                    raise BadRequest("Only one 'mask' file may be sent.", param="mask")
                out.mask = await value.read()
            else:
                raise BadRequest(
                    f"Unexpected file field '{name}'; send the picture as 'image' and the "
                    "optional mask as 'mask'.",
                    param=name,
                )
    finally:
        await form.close()
    if not out.images:
        raise BadRequest(
            "Missing required parameter: 'image' (the picture to edit).", param="image"
        )
    if len(out.images) > max_images:
        raise BadRequest(
            f"At most {max_images} images may be sent; got {len(out.images)}.", param="image"
        )
    return out
