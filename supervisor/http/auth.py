"""API keys: an ASGI middleware that lets a request through only with a valid key.

A client sends its key as ``Authorization: Bearer <key>`` (the OpenAI SDK's way)
or as ``x-api-key: <key>`` (the Anthropic SDK's way). Rules:

* no keys at all (``server.keys``, ``api_keys``, ``admin_keys``): everything is open;
* ``/health`` is always open (load balancers and ``mlx-gateway status`` probe it);
* the web UI's page and static files (``GET /ui``, ``/ui/static/…``) are open;
* admin endpoints (``/metrics``, ``/ui/logs``, ``POST /v1/models/{id}/…``, ``/admin/…``,
  Ollama's ``/api/pull``, ``/api/delete``, ``/api/copy``) need an ``admin`` app's key
  (``admin_keys``, or a ``server.keys`` entry with ``role: admin``) when there is
  one, else any ``client`` key;
* every other endpoint needs a key when ``api_keys`` or ``server.keys`` has one, and
  is open otherwise (``admin_keys`` alone guard only the admin endpoints);
* a ``read-only`` app may list and show (``GET``, Ollama's ``POST /api/show``), not
  generate, nor open a Realtime session.

A missing or unknown key is a 401 ``authentication_error``; a valid key whose role
does not allow the request is a 403 ``permission_error`` (``admin_key_required``,
``read_only_key``). A request over one of its app's limits is a 429
(:mod:`.app_limits`). Every request let through carries its app
(:func:`.caller.caller_of`; :data:`.caller.ANONYMOUS` without a key) and sees only
the app's models (:mod:`..pool.scope`).

WebSockets (``/v1/realtime``) follow the same rules at their handshake. A browser
cannot set headers on one, so the key may also come as the subprotocol
``openai-insecure-api-key.<key>`` (as OpenAI's own service takes it). A refused
handshake is answered with the same HTTP error body (ASGI's WebSocket denial
response), or, where the server lacks that extension, closed with code 1008 and
the message as its reason.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlx_gateway.supervisor import recorder
from mlx_gateway.supervisor.config.apps import KeyConfig
from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.http.app_limits import AppLimitExceeded, AppLimits, set_limits
from mlx_gateway.supervisor.http.caller import ANONYMOUS, set_caller
from mlx_gateway.supervisor.http.keyring import App, Apps, KeyRing
from mlx_gateway.supervisor.http.replies import error_response
from mlx_gateway.supervisor.pool.scope import reset_scope, set_scope

__all__ = ["AuthMiddleware", "KeyRing", "generates", "is_admin", "presented_key"]

OPEN_PATHS = frozenset({"/health"})
OPEN_FILES = "/v1/images/files/"
"""Generated images served for ``response_format: url``: the unguessable, expiring
id in the path is the credential (as OpenAI's signed URLs), so a page can load them."""
SELF_ADMITTED = frozenset({"/mcp"})
"""Paths whose every HTTP request is not one piece of work: the MCP server's (a
message each: a listing, a tool call) admits each tool call against the app's
limits itself (:func:`.app_limits.limits_of`), so a refused limit is its own
error, and a ``read-only`` app may connect and list."""
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


READ_ONLY_POSTS = frozenset({"/api/show"})
"""The ``POST`` endpoints that only show (Ollama's model details): open to ``read-only``."""


def generates(method: str, path: str) -> bool:
    """Whether a (non-admin) request does more than list and show: every method but
    ``GET``/``HEAD``/``OPTIONS`` except :data:`READ_ONLY_POSTS`. A ``read-only`` app
    may make only the others; an app's limits count only these."""
    return method not in ("GET", "HEAD", "OPTIONS") and path not in READ_ONLY_POSTS


class AuthMiddleware:
    """Refuse requests without a valid key (see the module docstring for the rules);
    put the key's app (:class:`.caller.Caller`) on every request it lets through,
    limit the request to the app's models (:mod:`..pool.scope`) and hold it to the
    app's limits (:mod:`.app_limits`).

    Wrap the app with it only when some key is configured."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        api_keys: Sequence[str] = (),
        admin_keys: Sequence[str] = (),
        keys: Sequence[KeyConfig] = (),
    ) -> None:
        self.app = app
        self.apps = Apps(api_keys=api_keys, admin_keys=admin_keys, keys=keys)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket") or (kind == "http" and _open(scope)):
            await self.app(scope, receive, send)
            return
        key = presented_key(scope)
        found = self.apps.find(key)
        method = "GET" if kind == "websocket" else scope["method"]
        path = scope["path"]
        working = kind == "websocket" or generates(method, path)  # a Realtime session works
        if path in SELF_ADMITTED:
            working = False  # each of its calls is admitted (and refused) by its server
            if found is not None and found.limits is not None:
                set_limits(scope, found.limits)
        error = self.check(method, path, key, found, working=working)
        limits = found.limits if found is not None and not is_admin(method, path) else None
        if error is None and limits is not None and working:
            try:
                limits.admit()
            except AppLimitExceeded as exceeded:
                error = exceeded
        else:
            limits = None  # nothing admitted: nothing to release
        if error is None:
            await self._run(scope, receive, send, found, limits)
        elif kind == "websocket":
            await _deny_websocket(error, scope, receive, send)
        else:
            await error_response(error)(scope, receive, send)

    async def _run(
        self, scope: Scope, receive: Receive, send: Send, app: App | None, limits: AppLimits | None
    ) -> None:
        caller = app.caller if app is not None else ANONYMOUS
        set_caller(scope, caller)
        token = set_scope(caller.models)
        try:
            await self.app(scope, receive, send)
        finally:
            reset_scope(token)
            if limits is not None:
                limits.release(recorder.tokens_used())

    def check(
        self,
        method: str,
        path: str,
        key: str | None,
        found: App | None = None,
        *,
        working: bool | None = None,
    ) -> GatewayError | None:
        """The error for a request with ``key`` (whose app is ``found``), or ``None``
        when it may pass; ``working``: whether it generates (default: by
        :func:`generates`)."""
        if working is None:
            working = generates(method, path)
        if found is None and key is not None:
            found = self.apps.find(key)
        role = found.caller.role if found is not None else None
        if is_admin(method, path):
            if role == "admin":
                return None
            if role is None:
                return _unauthenticated(key) if self.apps else None
            if self.apps.has_admin:
                return PermissionDenied(
                    "This endpoint needs an admin key (server.admin_keys, or a "
                    "server.keys entry with role: admin).",
                    code="admin_key_required",
                )
            if role == "read-only":
                return _read_only(found)
            return None
        if role is None:
            return _unauthenticated(key) if self.apps.closed else None
        if role == "read-only" and working:
            return _read_only(found)
        return None


def _read_only(found: App | None) -> PermissionDenied:
    name = found.caller.name if found is not None else "?"
    return PermissionDenied(
        f"The key of app {name!r} is read-only (server.keys role: read-only): it may list "
        "and show models but not generate; use a client key for this request.",
        code="read_only_key",
    )


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
        f"binding {host} without server.api_keys or server.keys: anyone who can reach "
        "this machine can use every model; set keys (or api_keys) or bind 127.0.0.1"
    )
