"""One request relayed to a peer: the body as received, the answer byte for byte.

The client's own key never leaves this gateway: the peer gets its configured key.
Hop-by-hop headers stay on each leg. The answer's bytes are passed on as they
arrive (``aiter_raw``: not decoded, not re-chunked by content), so an SSE stream
reaches the client exactly as the peer wrote it.
"""

from __future__ import annotations

import logging

import httpx
from starlette.types import Scope, Send

from mlx_gateway.supervisor.errors import GatewayError
from mlx_gateway.supervisor.http.replies import error_event
from mlx_gateway.supervisor.peers.directory import PEER_HEADER, VIA_HEADER, Peer

log = logging.getLogger("mlx_gateway.peers")

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_NOT_FORWARDED = HOP_BY_HOP | {"host", "content-length", "authorization", "x-api-key", VIA_HEADER}
_NOT_RELAYED = HOP_BY_HOP | {"date", "server", PEER_HEADER}
"""Hypercorn writes its own ``date`` and ``server``."""


async def open_upstream(
    client: httpx.AsyncClient, peer: Peer, scope: Scope, body: bytes
) -> httpx.Response:
    """Send the request to ``peer`` and return once its status and headers are in
    (the body is left to :func:`relay`).

    Raises:
        httpx.HTTPError: the peer could not be reached or dropped the connection.
    """
    headers = [
        (name.decode("latin-1"), value.decode("latin-1"))
        for name, value in scope.get("headers", ())
        if name.decode("latin-1").lower() not in _NOT_FORWARDED
    ]
    headers += list(peer.headers().items())
    path = scope.get("raw_path") or scope["path"].encode()
    query = scope.get("query_string", b"")
    url = (
        peer.config.url + path.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
    )
    request = client.build_request(scope["method"], url, headers=headers, content=body)
    return await client.send(request, stream=True)


async def relay(peer: Peer, response: httpx.Response, send: Send) -> None:
    """Pass ``response`` on to the client and close it (also when cancelled: the
    peer then sees its client leave and stops the work)."""
    try:
        headers = [
            (name, value)
            for name, value in response.headers.raw
            if name.decode("latin-1").lower() not in _NOT_RELAYED
        ]
        headers.append((PEER_HEADER.encode(), peer.name.encode("utf-8")))
        await send(
            {"type": "http.response.start", "status": response.status_code, "headers": headers}
        )
        try:
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.HTTPError as exc:
            log.warning("peer %s dropped a response midway: %s", peer.name, exc)
            if "content-length" in response.headers:
                raise  # the declared length cannot be met: the connection must break
            tail = b""
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                tail = error_event(
                    GatewayError(
                        f"The peer gateway '{peer.name}' that served this request went away "
                        "midway; retry the request.",
                        status=502,
                        code="peer_unavailable",
                    )
                )
            await send({"type": "http.response.body", "body": tail, "more_body": False})
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    finally:
        await response.aclose()
