"""The gateway's middleware stack, from the configuration.

Outermost first: observing (so 401s and 413s are counted and timed too), API keys
(so an unauthenticated client cannot make the gateway read a large body), then the
body cap.
"""

from __future__ import annotations

from starlette.middleware import Middleware

from ..config import GatewayConfig
from .auth import AuthMiddleware
from .limits import MIB, BodyLimitMiddleware
from .observe import ObserveMiddleware
from .recorder import Recorder

UPLOAD_KINDS = ("whisper", "image")
"""Worker kinds whose endpoints take file uploads (``max_upload_mb``)."""


def middleware_for(config: GatewayConfig, recorder: Recorder) -> list[Middleware]:
    server = config.server
    max_body = int(server.max_body_mb * MIB)
    uploads = [m.max_upload_mb for m in config.models if m.worker_kind in UPLOAD_KINDS]
    stack = [Middleware(ObserveMiddleware, recorder=recorder)]
    if server.api_keys or server.admin_keys:
        stack.append(
            Middleware(AuthMiddleware, api_keys=server.api_keys, admin_keys=server.admin_keys)
        )
    stack.append(
        Middleware(
            BodyLimitMiddleware,
            max_body=max_body,
            upload_max=int(max(uploads) * MIB) if uploads else max_body,
        )
    )
    return stack
