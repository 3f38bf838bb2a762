"""What ``GET /openapi.json`` says about the image routes."""

from __future__ import annotations

from mlx_gateway.supervisor.api.images.schemas import (
    ImageEditForm,
    ImageGenerationRequest,
    ImagesResponse,
)
from mlx_gateway.supervisor.http.openapi import OpenApi, Operation

OPENAPI = OpenApi(
    {
        ("POST", "/v1/images/generations"): Operation(
            "createImage",
            "Images from a text prompt, as JSON or as server-sent events.",
            request=ImageGenerationRequest,
            response=ImagesResponse,
            stream=True,
        ),
        ("POST", "/v1/images/edits"): Operation(
            "createImageEdit",
            "An edit of one or more input images (and a mask, for inpainting models).",
            request=ImageEditForm,
            files=("image", "mask"),
            response=ImagesResponse,
            stream=True,
        ),
        ("GET", "/v1/images/files/{name}"): Operation(
            "getImageFile",
            "A generated image kept for response_format 'url' (until it expires).",
            extra={
                f"image/{ext}": {"schema": {"type": "string", "contentMediaType": f"image/{ext}"}}
                for ext in ("png", "jpeg", "webp")
            },
            statuses=(404,),
        ),
    }
)
