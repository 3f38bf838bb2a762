"""``POST /v1/images/generations``, ``POST /v1/images/edits`` and the image files.

A request is checked here (fields, the ``WxH`` size against mflux's multiple of
16 and the model's ``max_output_pixels``) before any worker starts; the worker then
checks what depends on the model (its inputs, its own size rule) before ``Started``,
so every rejection is a plain HTTP error, streamed or not.

Answers: JSON with ``b64_json`` (default) or ``url`` per picture, or with
``stream: true`` an SSE stream of ``image_generation.partial_image`` (when
``partial_images`` > 0) and ``image_generation.completed`` events (``image_edit.*``
for edits), with a comment line per denoising step that keeps the connection busy.
URLs point at ``GET /v1/images/files/{id}.{ext}``, served from an in-memory store
bounded by ``server.image_store_mb`` for ``server.image_url_ttl`` seconds.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from uuid import uuid4

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.protocol.messages import GenerateImage, ImageStep
from mlx_gateway.supervisor.api.images.form import MIB, read_edit_form
from mlx_gateway.supervisor.api.images.schemas import (
    MEDIA_TYPES,
    CompletedImageEvent,
    ImageData,
    ImageFields,
    ImageGenerationRequest,
    ImagesResponse,
    PartialImageEvent,
    check_fields,
    event_types,
    parse_edit_form,
)
from mlx_gateway.supervisor.config.kinds import settings_as
from mlx_gateway.supervisor.config.kinds.image import ImageConfig, is_edit_model
from mlx_gateway.supervisor.config.schema import IMAGE_SIZE_MULTIPLE
from mlx_gateway.supervisor.engine.image_jobs import ImageJob, Picture
from mlx_gateway.supervisor.engine.kinds import IMAGE_KINDS, require_kind
from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http import sse
from mlx_gateway.supervisor.http.body import read_json
from mlx_gateway.supervisor.http.disconnect import unless_disconnected
from mlx_gateway.supervisor.http.image_store import ImageStore
from mlx_gateway.supervisor.http.replies import EventStream, JSONResponse, ended
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

logger = logging.getLogger(__name__)

GENERATIONS = "/v1/images/generations"
EDITS = "/v1/images/edits"
FILES = "/v1/images/files"
MAX_EDIT_IMAGES = 4
DEFAULT_IMAGE_MB = 20.0
"""The per-file upload limit when no edit model is configured (the request then
fails on its model anyway, but only after the form was read)."""


async def create_image(request: Request) -> Response:
    """Text to image."""
    req = await read_json(request, ImageGenerationRequest)
    handle = image_model(request, req.model, edit=False)
    msg = image_message(req, handle, images=0, mask=False)
    return await _serve(request, handle, req, msg, [], edit=False)


async def create_image_edit(request: Request) -> Response:
    """An edit of one or more input images (and a mask, for inpainting models)."""
    form = await read_edit_form(request, _upload_limit(request), MAX_EDIT_IMAGES)
    req = parse_edit_form(form.fields)
    handle = image_model(request, req.model, edit=True)
    form.check_sizes(int(settings_as(handle.config, ImageConfig).max_image_mb * MIB))
    msg = image_message(req, handle, images=len(form.images), mask=form.mask is not None)
    files = [*form.images, *([form.mask] if form.mask is not None else [])]
    return await _serve(request, handle, req, msg, files, edit=True)


def image_model(request: Request, name: str, *, edit: bool) -> ModelHandle:
    """The image model ``name`` names, checked to serve generations (``edit`` false)
    or edits: a 400 naming the endpoint that serves it otherwise."""
    handle: ModelHandle = gateway_of(request).registry.resolve(name)
    require_kind(handle, IMAGE_KINDS, EDITS if edit else GENERATIONS)
    if not edit and is_edit_model(handle.config):
        raise BadRequest(
            f"The model '{handle.name}' edits images (model_type image-edit); send it to "
            f"{EDITS} with an 'image'.",
            param="model",
            code="model_not_supported",
        )
    if edit and not is_edit_model(handle.config):
        raise BadRequest(
            f"The model '{handle.name}' generates images from text (model_type "
            f"{handle.config.model_type}); use {GENERATIONS}, or a model of model_type "
            "image-edit here.",
            param="model",
            code="model_not_supported",
        )
    return handle


async def pictures_of(
    request: Request, handle: ModelHandle, msg: GenerateImage, files: list[bytes]
) -> list[Picture]:
    """Every finished picture of ``msg`` on ``handle``'s worker (unless the client
    leaves first)."""
    job = await unless_disconnected(request, ImageJob.start(handle, handle.name, msg, files))
    try:
        return await unless_disconnected(request, job.collect())
    finally:
        await job.aclose()


async def get_image_file(request: Request) -> Response:
    """A stored image by ``{id}.{ext}``; 404 when unknown or expired."""
    name = request.path_params["name"]
    key, _, ext = name.rpartition(".")
    store = image_store(request)
    item = store.get(key) if key else None
    if item is None or MEDIA_TYPES.get(ext) != item.media_type:
        raise GatewayError(
            f"The image '{name}' does not exist or has expired (images are kept {store.ttl:g} s).",
            status=404,
            type="invalid_request_error",
            code="image_not_found",
        )
    age = int(store.expires_in(key))
    return Response(
        item.data, media_type=item.media_type, headers={"Cache-Control": f"private, max-age={age}"}
    )


def image_store(request: Request) -> ImageStore:
    """The app's image store (sized by the server settings)."""
    return gateway_of(request).images


def _upload_limit(request: Request) -> int:
    """The largest file any edit model accepts: the model is named inside the form,
    so the body is bounded by this before the model is known."""
    configs = [handle.config for handle in gateway_of(request).registry.handles]
    limits = [c.max_image_mb for c in configs if isinstance(c, ImageConfig) and c.edits]
    return int(max(limits, default=DEFAULT_IMAGE_MB) * MIB)


def image_message(
    req: ImageFields, handle: ModelHandle, *, images: int, mask: bool
) -> GenerateImage:
    """The worker request for ``req`` on ``handle``, its fields checked (the size
    against the model's ``max_output_pixels``)."""
    size = check_fields(
        req, IMAGE_SIZE_MULTIPLE, settings_as(handle.config, ImageConfig).max_output_pixels
    )
    return GenerateImage(
        request_id=f"img-{uuid4().hex}",
        prompt=req.prompt,
        n=req.n,
        width=size[0] if size else None,
        height=size[1] if size else None,
        seed=req.seed,
        steps=req.steps,
        guidance=req.guidance,
        negative_prompt=req.negative_prompt or None,
        images=images,
        mask=mask,
        output_format=req.output_format,
        output_compression=req.output_compression,
        partial_images=req.partial_images if req.stream else 0,
    )


async def _serve(
    request: Request,
    handle: ModelHandle,
    req: ImageFields,
    msg: GenerateImage,
    files: list[bytes],
    *,
    edit: bool,
) -> Response:
    created = int(time.time())
    if req.stream:
        job = await unless_disconnected(request, ImageJob.start(handle, handle.name, msg, files))
        return EventStream(_events(job, req, msg, edit), job)
    pictures = await pictures_of(request, handle, msg, files)
    url = req.response_format == "url"
    store = image_store(request) if url else None
    data = []
    for picture in pictures:
        if store is not None:
            key = store.put(picture.data, MEDIA_TYPES[req.output_format])
            link = f"{str(request.base_url).rstrip('/')}{FILES}/{key}.{req.output_format}"
            data.append(ImageData(url=link, seed=picture.seed))
        else:
            data.append(ImageData(b64_json=_b64(picture.data), seed=picture.seed))
    size = f"{pictures[0].width}x{pictures[0].height}" if pictures else ""
    return JSONResponse(
        ImagesResponse(created=created, data=data, output_format=req.output_format, size=size)
    )


def _events(
    job: ImageJob, req: ImageFields, msg: GenerateImage, edit: bool
) -> AsyncIterator[bytes]:
    """Partial and completed events, a comment per step, ``[DONE]``; a failure
    after the start ends the stream with an error event."""
    return ended(_updates(job, req, msg, edit), job, logger, "image stream")


async def _updates(
    job: ImageJob, req: ImageFields, msg: GenerateImage, edit: bool
) -> AsyncGenerator[bytes, None]:
    partial_type, completed_type = event_types(edit)
    async for update in job.updates():
        if isinstance(update, ImageStep):
            yield sse.comment(f"image {update.index + 1}/{msg.n} step {update.step}/{update.steps}")
            continue
        yield sse.data(_event(update, req, partial_type, completed_type))


def _event(
    picture: Picture, req: ImageFields, partial_type: str, completed_type: str
) -> PartialImageEvent | CompletedImageEvent:
    size = f"{picture.width}x{picture.height}"
    now = int(time.time())
    if picture.partial is not None:
        return PartialImageEvent(
            type=partial_type,
            b64_json=_b64(picture.data),
            partial_image_index=picture.partial,
            created_at=now,
            size=size,
            output_format=req.output_format,
        )
    return CompletedImageEvent(
        type=completed_type,
        b64_json=_b64(picture.data),
        created_at=now,
        size=size,
        output_format=req.output_format,
    )


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


__all__ = [
    "create_image",
    "create_image_edit",
    "get_image_file",
    "image_message",
    "image_model",
    "pictures_of",
]
