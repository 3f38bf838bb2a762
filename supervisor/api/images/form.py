"""Read the ``multipart/form-data`` body of ``/v1/images/edits`` within a size limit.

The form carries text fields and files: ``image`` (or ``image[]``, repeated, as the
OpenAI SDK sends a list) and an optional ``mask``. The body is read within its limit
by :mod:`mlx_gateway.supervisor.http.multipart` (413 beyond it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from starlette.requests import Request

from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.http.multipart import FORM_OVERHEAD, MIB, read_form

MAX_FILES = 17
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


async def read_edit_form(request: Request, file_limit: int, max_images: int) -> EditForm:
    """The form of ``request``: at most ``max_images`` images and a mask, each at
    most ``file_limit`` bytes (the body as a whole is bounded by their sum).

    Raises :class:`BadRequest` for a body that is not a well-formed multipart form
    or a file under another name, :class:`ImageTooLarge` beyond the limit."""
    form = await read_form(
        request,
        body_limit=file_limit * (max_images + 1) + FORM_OVERHEAD,
        too_large=lambda: ImageTooLarge(file_limit),
        max_files=MAX_FILES,
        file_field="image",
        content="the picture",
    )
    out = EditForm(form.fields)
    for part in form.files:
        if part.field in IMAGE_FIELDS:
            out.images.append(part.data)
        elif part.field == "mask":
            if out.mask is not None:
                raise BadRequest("Only one 'mask' file may be sent.", param="mask")
            out.mask = part.data
        else:
            raise BadRequest(
                f"Unexpected file field '{part.field}'; send the picture as 'image' and the "
                "optional mask as 'mask'.",
                param=part.field,
            )
    if not out.images:
        raise BadRequest(
            "Missing required parameter: 'image' (the picture to edit).", param="image"
        )
    if len(out.images) > max_images:
        raise BadRequest(
            f"At most {max_images} images may be sent; got {len(out.images)}.", param="image"
        )
    return out
