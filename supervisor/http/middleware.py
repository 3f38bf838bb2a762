"""The gateway's middleware stack, from the configuration.

Outermost first: observing (so 401s and 413s are counted and timed too), closing
the connection after an answer sent before the body was read (so a client's next
request does not land on a connection with an unread body), API keys (so an
unauthenticated client cannot make the gateway read a large body), then the body
cap, then the headers that routes note on the way (:mod:`.notes`).
"""

from __future__ import annotations

from starlette.middleware import Middleware

from mlx_gateway.supervisor.config import GatewayConfig, ModelConfig
from mlx_gateway.supervisor.config.kinds.image import ImageConfig
from mlx_gateway.supervisor.config.kinds.vlm import VlmConfig
from mlx_gateway.supervisor.config.kinds.whisper import WhisperConfig
from mlx_gateway.supervisor.http.auth import AuthMiddleware
from mlx_gateway.supervisor.http.limits import MIB, BodyLimitMiddleware
from mlx_gateway.supervisor.http.notes import NotesMiddleware
from mlx_gateway.supervisor.http.observe import ObserveMiddleware
from mlx_gateway.supervisor.http.unread_body import CloseUnreadBodyMiddleware
from mlx_gateway.supervisor.recorder import Recorder

FORM_OVERHEAD = 64 * 1024
"""Room beyond the files for a form's other fields and part headers (as the
upload readers allow)."""
TEXT_OVERHEAD = MIB
"""Room beside base64 images for a chat request's text."""
MCP_PATH = "/mcp"
EDIT_FILES = 5
"""Files an image edit may carry: up to 4 images and a mask (``images.MAX_EDIT_IMAGES``)."""


def route_limits(models: list[ModelConfig]) -> dict[str, int]:
    """The body cap of each file-carrying path, from the largest files the models
    accept (paths no model serves are left to ``max_body_mb``)."""

    def largest(sizes: list[float]) -> float | None:
        return max(sizes) if sizes else None

    limits: dict[str, int] = {}
    audio = largest([m.max_upload_mb for m in models if isinstance(m, WhisperConfig)])
    if audio is not None:
        limits["/v1/audio/"] = int(audio * MIB) + FORM_OVERHEAD
    edits = largest([m.max_image_mb for m in models if isinstance(m, ImageConfig)])
    if edits:
        limits["/v1/images/edits"] = int(edits * MIB) * EDIT_FILES + FORM_OVERHEAD
    # A chat request carries its images and videos inline as base64 data URLs (4
    # bytes per 3); so may a Responses request.
    vision = largest(
        [
            m.max_image_mb * m.max_images + m.max_video_mb * m.max_videos
            for m in models
            if isinstance(m, VlmConfig)
        ]
    )
    if vision:
        limits["/v1/chat/completions"] = int(vision * MIB * 4 / 3) + TEXT_OVERHEAD
        limits["/v1/responses"] = limits["/v1/chat/completions"]
    # An MCP tool call carries its audio or its image to edit inline, as base64.
    files = largest([size for size in (audio, edits) if size])
    if files:
        limits[MCP_PATH] = int(files * MIB * 4 / 3) + TEXT_OVERHEAD
    return limits


def body_limit(config: GatewayConfig, path: str) -> int:
    """The most bytes a request body to ``path`` may have (``max_body_mb``, or the
    path's own cap from :func:`route_limits` when larger)."""
    max_body = int(config.server.max_body_mb * MIB)
    return max(max_body, route_limits(config.models).get(path, 0))


def middleware_for(config: GatewayConfig, recorder: Recorder) -> list[Middleware]:
    server = config.server
    max_body = int(server.max_body_mb * MIB)
    stack = [
        Middleware(ObserveMiddleware, recorder=recorder),
        Middleware(CloseUnreadBodyMiddleware),
    ]
    if server.api_keys or server.admin_keys or server.keys:
        stack.append(
            Middleware(
                AuthMiddleware,
                api_keys=server.api_keys,
                admin_keys=server.admin_keys,
                keys=server.keys,
            )
        )
    stack.append(
        Middleware(BodyLimitMiddleware, max_body=max_body, routes=route_limits(config.models))
    )
    stack.append(Middleware(NotesMiddleware))
    return stack
