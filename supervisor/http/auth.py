"""API keys: an ASGI middleware that lets a request through only with a valid key.

A client sends its key as ``Authorization: Bearer <key>`` (the OpenAI SDK's way)
or as ``x-api-key: <key>`` (the Anthropic SDK's way). Rules:

* no ``api_keys`` and no ``admin_keys``: everything is open;
* ``/health`` is always open (load balancers and ``mlx-gateway status`` probe it);
* the web UI's page and static files (``GET /ui``, ``/ui/static/…``) are open;
* admin endpoints (``/metrics``, ``/ui/logs``, ``POST /v1/models/{id}/…``, ``/admin/…``,
  Ollama's ``/api/pull``, ``/api/delete``, ``/api/copy``)
  need one of ``admin_keys`` when that list is set, else one of ``api_keys``;
* every other endpoint needs one of ``api_keys`` (or of ``admin_keys``) when
  ``api_keys`` is set, and is open otherwise.

A missing or unknown key is a 401 ``authentication_error``; a valid client key on
an admin endpoint that wants an admin key is a 403 ``permission_error``.

WebSockets (``/v1/realtime``) follow the same rules at their handshake. A browser
cannot set headers on one, so the key may also come as the subprotocol
``openai-insecure-api-key.<key>`` (as OpenAI's own service takes it). A refused
handshake is answered with the same HTTP error body (ASGI's WebSocket denial
response), or, where the server lacks that extension, closed with code 1008 and
the message as its reason.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.http.replies import error_response

OPEN_PATHS = frozenset({"/health"})
OPEN_FILES = "/v1/images/files/"
"""Generated images served for ``response_format: url``: the unguessable, expiring
id in the path is the credential (as OpenAI's signed URLs), so a page can load them."""
OLLAMA_ADMIN = frozenset({"/api/pull", "/api/delete", "/api/copy", "/api/create", "/api/push"})
UI_PAGE = "/ui"
UI_FILES = "/ui/static/"
"""The web UI's page and files hold no data (what it shows comes from API calls made
with the key typed into it), so a browser can open them without a key."""


class AuthenticationError(GatewayError):
    status = 401
    type = "authentication_error"


class PermissionDenied(GatewayError):
    status = 403
    type = "permission_error"


def is_admin(method: str, path: str) -> bool:
    """Whether ``method path`` is an admin endpoint.

    Every ``POST`` under ``/v1/models/`` is one (``load``, ``unload``): the model
    routes clients use there are ``GET`` only, so a model id that happens to end in
    ``/load`` cannot turn a client request into an admin one."""
    if path in ("/metrics", "/ui/logs") or path.startswith("/admin/"):
        return True
    if path == "/v1/requests" or path.startswith("/v1/requests/"):  # in flight, cancel
        return True
    if method == "POST" and path == "/unload":  # every idle model (mlx-vlm's route)
        return True
    if path == "/v1/adapters" or path.startswith("/v1/adapters/"):  # LoRA mounts
        return True
    if path in OLLAMA_ADMIN:  # models pulled, deleted, copied
        return True
    return method == "POST" and path.startswith("/v1/models/")


class KeyRing:
    """A set of keys checked in constant time.

    Keys are kept as SHA-256 digests and every one is compared, so neither the
    length of a guess nor how far it matches shows in the time a check takes."""

    def __init__(self, keys: Iterable[str]) -> None:
        self._digests = [_digest(key) for key in keys]

    def __bool__(self) -> bool:
        return bool(self._digests)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        candidate = _digest(key)
        found = False
        for digest in self._digests:
            found |= hmac.compare_digest(digest, candidate)
        return found


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


KEY_PROTOCOL = "openai-insecure-api-key."
"""The WebSocket subprotocol prefix that carries a browser's key."""


def presented_key(scope: Scope) -> str | None:
    """The key a request carries: the Bearer token, else ``x-api-key``, else (a
    WebSocket) the ``openai-insecure-api-key.`` subprotocol."""
    bearer = None
    api_key = None
    protocol_key = None
    for name, value in scope.get("headers", ()):
        if name == b"sec-websocket-protocol" and scope["type"] == "websocket":
            for offered in value.decode("latin-1").split(","):
                offered = offered.strip()
                if offered.startswith(KEY_PROTOCOL) and protocol_key is None:
                    protocol_key = offered[len(KEY_PROTOCOL) :] or None
        if name == b"authorization" and bearer is None:
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                bearer = token.strip()
        elif name == b"x-api-key" and api_key is None:
            api_key = value.decode("latin-1").strip() or None
    return bearer or api_key or protocol_key


class AuthMiddleware:
    """Refuse requests without a valid key (see the module docstring for the rules).

    Wrap the app with it only when some key is configured."""

    def __init__(self, app: ASGIApp, *, api_keys: Iterable[str], admin_keys: Iterable[str]):
        self.app = app
        self.client_keys = KeyRing(api_keys)
        self.admin_keys = KeyRing(admin_keys)
        # An admin key also opens the client endpoints: one key for an operator.
        self.any_key = KeyRing([*api_keys, *admin_keys])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            error = self.check("GET", scope["path"], presented_key(scope))
            if error is None:
                await self.app(scope, receive, send)
            else:
                await _deny_websocket(error, scope, receive, send)
            return
        if scope["type"] != "http" or _open(scope):
            await self.app(scope, receive, send)
            return
        error = self.check(scope["method"], scope["path"], presented_key(scope))
        if error is None:
            await self.app(scope, receive, send)
            return
        await error_response(error)(scope, receive, send)

    def check(self, method: str, path: str, key: str | None) -> GatewayError | None:
        """The error for a request with ``key``, or ``None`` when it may pass."""
        if is_admin(method, path):
            if self.admin_keys:
                if key in self.admin_keys:
                    return None
                if key in self.client_keys:
                    return PermissionDenied(
                        "This endpoint needs an admin key (server.admin_keys).",
                        code="admin_key_required",
                    )
                return _unauthenticated(key)
            if not self.client_keys or key in self.client_keys:
                return None
            return _unauthenticated(key)
        if not self.client_keys or key in self.any_key:
            return None
        return _unauthenticated(key)


async def _deny_websocket(error: GatewayError, scope: Scope, receive: Receive, send: Send) -> None:
    """Refuse a WebSocket handshake with ``error``'s HTTP answer where the server can
    send one, else with a close whose reason is the message."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008, "reason": error.message[:120]})
        return

    async def as_websocket(message: Message) -> None:
        await send({**message, "type": "websocket." + message["type"]})

    await error_response(error)({**scope, "type": "http"}, receive, as_websocket)


def _open(scope: Scope) -> bool:
    path = scope["path"]
    if scope["method"] != "GET":
        return path in OPEN_PATHS
    return (
        path in OPEN_PATHS
        or path == UI_PAGE
        or path.startswith(OPEN_FILES)
        or path.startswith(UI_FILES)
    )


def _unauthenticated(key: str | None) -> AuthenticationError:
    if key is None:
        message = (
            "Missing API key: send it as 'Authorization: Bearer <key>' or in the "
            "'x-api-key' header."
        )
        code = "missing_api_key"
    else:
        message = "Incorrect API key provided."
        code = "invalid_api_key"
    return AuthenticationError(
        message, code=code, headers={"WWW-Authenticate": 'Bearer realm="mlx-gateway"'}
    )


def key_fingerprint(scope: Scope) -> str:
    """A short fingerprint of the request's key for logs (the first 8 hex digits of
    its SHA-256; ``-`` without a key): which client did it, never the key itself."""
    key = presented_key(scope)
    return hashlib.sha256(key.encode()).hexdigest()[:8] if key else "-"


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` accepts connections from this machine only."""
    host = host.strip().strip("[]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost: assume it is reachable


def exposure_warning(host: str, api_keys: Iterable[str]) -> str | None:
    """The warning to log when the gateway binds beyond loopback without keys."""
    if is_loopback(host) or any(True for _ in api_keys):
        return None
    return (
        f"binding {host} without server.api_keys: anyone who can reach this machine "
        "can use every model; set api_keys (and admin_keys) or bind 127.0.0.1"
    )
