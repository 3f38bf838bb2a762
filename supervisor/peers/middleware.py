"""Per request, this gateway or a peer: an ASGI middleware in front of the routes.

* ``POST /v1/…`` (every API route that names a ``model``): the body is read, its
  model looked up here and at the peers that are up. One place serving it: there.
  Several (this gateway and peers, or several peers): the one with the fewest
  requests in flight from this gateway (ties: this gateway first, then the order of
  ``server.peers``). A peer that cannot be reached is marked down and the next
  replica is tried; so is one answering 502/503/504 while another replica is left.
  A Responses request with ``previous_response_id`` goes to the replica storing that
  response first (this gateway's store, else the peers are asked for it).
* ``POST /v1/models/{id}/load|unload|pin`` of a model only peers serve: at the
  first of them.
* ``GET``/``DELETE /v1/responses/{id}…`` and ``GET /v1/images/files/{name}``: stored
  on whichever gateway made them, so this gateway answers if it can, else the first
  peer that knows the id does.
* A request that already came from a peer (:data:`.directory.VIA_HEADER`) is always
  served here, so gateways peering each other never pass a request round.

While a request is at a peer, a client that leaves closes the upstream request
(the peer then cancels the generation, as for its own clients).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import httpx
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlx_gateway.supervisor.errors import GatewayError, ModelNotFound
from mlx_gateway.supervisor.http.caller import caller_of
from mlx_gateway.supervisor.http.disconnect import unless_gone
from mlx_gateway.supervisor.peers.directory import VIA_HEADER, Peer, PeerDirectory, _describe
from mlx_gateway.supervisor.peers.forward import open_upstream, relay
from mlx_gateway.supervisor.peers.target import model_of, previous_response_of

RESPONSES_PATHS = ("/v1/responses", "/responses", "/v1/responses/input_tokens")
MODEL_PATHS = ("/rerank", "/v2/rerank", "/tokenize", "/detokenize")
"""Routes outside ``/v1/`` whose body names a model (rerank and tokenizer clients')."""
"""The Responses API's create routes (with and without ``/v1``)."""
RETRY_ELSEWHERE = frozenset({502, 503, 504})
"""A peer's answers that send the request to the next replica, when one is left."""

ErrorRenderer = Callable[[str, GatewayError], Response]
"""The error response for a path (Anthropic-shaped on ``/v1/messages``)."""


class LocalModel(Protocol):
    """A model this gateway serves, as a replica: its load."""

    @property
    def name(self) -> str: ...
    @property
    def inflight(self) -> int: ...
    @property
    def waiting(self) -> int: ...


class LocalModels(Protocol):
    """This gateway's models (its registry): a name's model, or its route."""

    def resolve(self, name: str) -> LocalModel: ...
    def route(self, name: str) -> object | None: ...


class StoredResponses(Protocol):
    def get(self, key: str) -> object | None: ...


class Here(Protocol):
    """What the middleware reads of this gateway (its services: the app's
    :class:`~...gateway.Gateway`)."""

    @property
    def peers(self) -> PeerDirectory: ...
    @property
    def registry(self) -> LocalModels: ...
    @property
    def responses(self) -> StoredResponses: ...


HereOf = Callable[[Scope], Here]
"""This gateway's services, for a request's scope."""


@dataclass
class _Local:
    """This gateway as a replica."""

    name: str
    load: int


class PeerMiddleware:
    def __init__(self, app: ASGIApp, *, render_error: ErrorRenderer, here: HereOf) -> None:
        self.app = app
        self.render_error = render_error
        self.here = here
        self._local_inflight: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _came_from_peer(scope):
            await self.app(scope, receive, send)
            return
        here = self.here(scope)
        directory = here.peers
        method, path = scope["method"], scope["path"]
        if not directory.peers:
            await self.app(scope, receive, send)
        elif method == "POST" and (
            (path.startswith("/v1/") and not path.startswith("/v1/models")) or path in MODEL_PATHS
        ):
            await self._by_model(scope, receive, send, here)
        elif method == "POST" and (name := _admin_target(path)) is not None:
            await self._admin_action(scope, receive, send, here, name)
        elif (method in ("GET", "DELETE") and path.startswith("/v1/responses/")) or (
            method == "GET" and path.startswith("/v1/images/files/")
        ):
            await self._here_then_peers(scope, receive, send, directory)
        else:
            await self.app(scope, receive, send)

    # ----------------------------------------------------------- by model

    async def _by_model(self, scope: Scope, receive: Receive, send: Send, here: Here) -> None:
        directory, registry = here.peers, here.registry
        body = await _read_body(receive)
        if body is None:
            return  # the client left while sending
        replay = _replaying(body, receive)
        name = model_of(_header(scope, b"content-type"), body)
        # outside the key's scope a model is no peer's either (nor here: a 404)
        wanted = name if name and caller_of(scope).allows(name) else None
        local = _local_handle(registry, name)
        # A route of this gateway is answered here (its models may be anywhere in it).
        routed = local is None and wanted is not None and registry.route(wanted) is not None
        peers = directory.serving(wanted) if wanted and not routed else []
        if not peers:
            down = directory.last_known(wanted) if wanted and local is None else []
            if down:
                error = GatewayError(
                    f"Model '{name}' is served by the peer gateway "
                    f"{', '.join(repr(p.name) for p in down)}, which cannot be reached now "
                    f"({down[0].error}); retry later.",
                    status=503,
                    code="peer_unavailable",
                    headers={"Retry-After": str(max(1, round(directory.interval)))},
                )
                await self.render_error(scope["path"], error)(scope, replay, send)
            else:
                await self.app(scope, replay, send)
            return
        replicas: list[_Local | Peer] = list(peers)
        if local is not None:
            busy = local.inflight + local.waiting
            replicas.append(_Local(local.name, max(busy, self._local_inflight[local.name])))
        # Stable sort: this gateway before the peers at equal load, peers in config order.
        replicas.sort(key=lambda r: (r.load if isinstance(r, _Local) else r.inflight, _rank(r)))
        if scope["path"] in RESPONSES_PATHS and (previous := previous_response_of(body)):
            # A conversation goes on where its stored response is.
            owner = await _holder(directory, here.responses, replicas, previous)
            if owner is not None:
                replicas.remove(owner)
                replicas.insert(0, owner)
        failures: list[str] = []
        for i, replica in enumerate(replicas):
            if isinstance(replica, _Local):
                self._local_inflight[replica.name] += 1
                try:
                    await self.app(scope, replay, send)
                finally:
                    self._local_inflight[replica.name] -= 1
                return
            last = i == len(replicas) - 1
            outcome = await _at_peer(directory, replica, scope, receive, send, body, last)
            if outcome is None:
                return
            failures.append(f"{replica.name}: {outcome}")
        error = GatewayError(
            f"Model '{name}': no peer gateway serving it could take the request "
            f"({'; '.join(failures)}); retry later.",
            status=502,
            code="peer_unavailable",
        )
        await self.render_error(scope["path"], error)(scope, replay, send)

    # ---------------------------------------------------- admin actions

    async def _admin_action(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        here: Here,
        name: str,
    ) -> None:
        """``load``/``unload``/``pin`` of a model served only at peers: at the first
        peer serving it (with that peer's key, which must be an admin key there)."""
        directory = here.peers
        peers = directory.serving(name)
        if _local_handle(here.registry, name) is not None or not peers:
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if body is None:
            return
        await _at_peer(directory, peers[0], scope, receive, send, body, True)

    # ---------------------------------------------------- stored objects

    async def _here_then_peers(
        self, scope: Scope, receive: Receive, send: Send, directory: PeerDirectory
    ) -> None:
        body = await _read_body(receive)
        if body is None:
            return
        held: list[Message] = []

        async def hold_404(message: Message) -> None:
            if held or (message["type"] == "http.response.start" and message["status"] == 404):
                held.append(message)
            else:
                await send(message)

        await self.app(scope, _replaying(body, receive), hold_404)
        if not held:
            return
        for peer in [p for p in directory.peers if p.up]:
            outcome = await _at_peer(directory, peer, scope, receive, send, body, False, {404})
            if outcome is None:
                return
        for message in held:
            await send(message)


async def _at_peer(
    directory: PeerDirectory,
    peer: Peer,
    scope: Scope,
    receive: Receive,
    send: Send,
    body: bytes,
    last: bool,
    pass_over: frozenset[int] | set[int] = RETRY_ELSEWHERE,
) -> str | None:
    """Serve the request at ``peer``: ``None`` once it is answered (or the client
    left), else why the next replica should be tried (nothing was sent yet)."""
    peer.inflight += 1
    try:

        async def attempt() -> str | None:
            try:
                response = await open_upstream(directory.client, peer, scope, body)
            except httpx.HTTPError as exc:
                why = _describe(exc)
                directory.mark_down(peer, why)
                peer.failed += 1
                return why
            if response.status_code in pass_over and not last:
                await response.aclose()
                peer.failed += 1
                return f"HTTP {response.status_code}"
            peer.forwarded += 1
            await relay(peer, response, send)
            return None

        try:
            return await unless_gone(receive, attempt())
        except ClientDisconnect:
            return None  # the upstream request was closed with the cancelled attempt
    finally:
        peer.inflight -= 1


async def _holder(
    directory: PeerDirectory,
    store: StoredResponses,
    replicas: list[_Local | Peer],
    response_id: str,
) -> _Local | Peer | None:
    """The replica that stores the response ``response_id`` (this gateway's
    ``store`` first, then the peers, asked with ``GET /v1/responses/{id}``); ``None``
    when none does."""
    if store.get(response_id) is not None:
        return next((r for r in replicas if isinstance(r, _Local)), None)
    for replica in replicas:
        if isinstance(replica, Peer):
            url = f"{replica.config.url}/v1/responses/{response_id}"
            try:
                answer = await directory.client.get(
                    url, headers=replica.headers(), timeout=directory.timeout
                )
            except httpx.HTTPError:
                continue  # unreachable: the replicas' own order and failover apply
            if answer.status_code == 200:
                return replica
    return None


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body; ``None`` when the client left before sending it."""
    parts: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` giving ``body`` once, then what the client sends next."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _header(scope: Scope, name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return ""


def _came_from_peer(scope: Scope) -> bool:
    return bool(_header(scope, VIA_HEADER.encode()))


ADMIN_ACTIONS = ("/load", "/unload", "/pin")


def _admin_target(path: str) -> str | None:
    """The model of ``POST /v1/models/{id}/load|unload|pin`` (ids may hold '/')."""
    if not path.startswith("/v1/models/"):
        return None
    for action in ADMIN_ACTIONS:
        if path.endswith(action) and len(path) > len("/v1/models/") + len(action):
            return path[len("/v1/models/") : -len(action)]
    return None


def _local_handle(registry: LocalModels, name: str | None) -> LocalModel | None:
    if name is None:
        return None
    try:
        return registry.resolve(name)
    except ModelNotFound:
        return None


def _rank(replica: _Local | Peer) -> int:
    return 0 if isinstance(replica, _Local) else 1
