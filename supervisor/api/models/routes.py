"""``GET /v1/models`` and ``GET /v1/models/{model_id}`` (ids may contain ``/``)."""

from __future__ import annotations

import math
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.protocol.kinds import ADAPTERS, PROGRESS
from mlx_gateway.supervisor.engine.image_jobs import progress_of
from mlx_gateway.supervisor.engine.kinds import serves
from mlx_gateway.supervisor.errors import ModelNotFound
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.replies import JSONResponse
from mlx_gateway.supervisor.pool.fit import assess
from mlx_gateway.supervisor.pool.keep_alive import client_set, expires_at
from mlx_gateway.supervisor.pool.model_files import configured_context_window
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.routes import loaded
from mlx_gateway.supervisor.pool.scope import allows_name

CREATED = int(time.time())
"""The ``created`` of every model: when the gateway started."""

OWNED_BY = "mlx-gateway"


def model_object(handle: ModelHandle) -> dict[str, Any]:
    """The OpenAI model object of ``handle``, plus its live status (``state``,
    ``inflight``, ...) and configuration facts (``aliases``, ``model_type``)."""
    entry: dict[str, Any] = {
        "id": handle.name,
        "object": "model",
        "created": CREATED,
        "owned_by": OWNED_BY,
    }
    for key, value in handle.status().public().items():
        entry.setdefault(key, value)
    entry.setdefault("aliases", list(handle.config.aliases))
    entry.setdefault("model_type", handle.config.model_type)
    entry.setdefault("source", handle.config.source)
    window = handle.facts.context_length if handle.facts is not None else None
    if window is None:
        window = configured_context_window(handle.config)
    if window is not None:
        entry.setdefault("context_window", window)
    # When an idle loaded model will be stopped (Unix time; null: not loaded, busy,
    # or kept without limit), and the lifetime a client set (seconds, -1: forever).
    entry.setdefault("expires_at", expires_at(handle))
    if (asked := client_set(handle)) is not None:
        entry.setdefault("keep_alive", -1 if math.isinf(asked) else asked)
    if serves(handle, ADAPTERS):  # the ids a request's "adapter" may name
        entry.setdefault("adapters", [m.id for m in handle.adapters])
    if serves(handle, PROGRESS):  # how far each image request got
        entry.setdefault("progress", progress_of(handle.name))
    return entry


def route_object(route: Any) -> dict[str, Any]:
    """The model object of a route: a served name standing for its models, with
    ``route`` (its strategy and models) and ``state`` (``ready`` when one of them is
    loaded); an answer names the model that served it."""
    members = route.members
    ready = any(loaded(h) for h in members)
    return {
        "id": route.name,
        "object": "model",
        "created": CREATED,
        "owned_by": OWNED_BY,
        "state": "ready" if ready else "unloaded",
        "inflight": sum(h.status().inflight for h in members),
        "model_type": members[0].config.model_type if members else None,
        "route": {"strategy": route.strategy, "models": [h.name for h in members]},
    }


def peer_model_object(model_id: str, peers: list[Any]) -> dict[str, Any]:
    """A model served by peer gateways (those that are up): the first one's model
    object, with ``peer`` (its name) and ``peers`` (every peer serving it)."""
    entry = dict(peers[0].models[model_id])
    entry["peer"] = peers[0].name
    entry["peers"] = [p.name for p in peers]
    return entry


def _peer_entries(request: Request, local: set[str]) -> list[dict[str, Any]]:
    directory = gateway_of(request).peers
    entries: list[dict[str, Any]] = []
    seen: set[str] = set()
    for peer in directory.peers:
        for model_id in peer.models if peer.up else ():
            if model_id in local or model_id in seen or not allows_name(model_id):
                continue
            seen.add(model_id)
            serving = [p for p in directory.serving(model_id) if model_id in p.models]
            entries.append(peer_model_object(model_id, serving))
    return entries


def _with_peers(request: Request, entry: dict[str, Any]) -> dict[str, Any]:
    """A local model also served by peers lists them in ``peers``."""
    directory = gateway_of(request).peers
    if not request.headers.get("x-mlx-gateway-via"):
        also = [p.name for p in directory.serving(entry["id"])]
        if also:
            entry["peers"] = also
    return entry


def _with_fit(registry: Any, handle: ModelHandle, entry: dict[str, Any]) -> dict[str, Any]:
    """``fit``: would a load fit now (the verdict of ``GET …/fit`` and who it evicts)."""
    if registry.placement is not None:
        answer = assess(registry.placement, handle)  # type: ignore[arg-type]
        blockers = [b.name for b in answer.blockers]
        entry["fit"] = {"verdict": answer.verdict, "evict": answer.evict, "blockers": blockers}
    return entry


def memory_summary(registry: Any) -> dict[str, int] | None:
    """The memory budget, what the resident models reserve and what is free (bytes);
    ``None`` for a registry without a placement (the API tests' in-process fake)."""
    placement = registry.placement
    return placement.summary() if placement is not None else None


async def list_models(request: Request) -> Response:
    """Every served model, in configuration order, the routes, then the models of peer gateways
    (not listed to a peer's own health check, so two gateways peering each other
    list only their own models to each other), and the memory budget."""
    registry = gateway_of(request).registry
    handles = registry.visible()
    data = [_with_peers(request, _with_fit(registry, h, model_object(h))) for h in handles]
    data += [route_object(route) for route in registry.visible_routes()]
    if not request.headers.get("x-mlx-gateway-via"):
        data += _peer_entries(request, {h.name for h in handles})
    body: dict[str, Any] = {"object": "list", "data": data}
    if (memory := memory_summary(registry)) is not None:
        body["memory"] = memory
    return JSONResponse(body)


async def retrieve_model(request: Request) -> Response:
    """One model by served name or alias (here, else at a peer that is up); 404
    listing the served names otherwise."""
    name = request.path_params["model_id"]
    registry = gateway_of(request).registry
    if (route := registry.route(name)) is not None:
        return JSONResponse(route_object(route))
    try:
        handle = registry.resolve(name)
    except ModelNotFound:
        directory = gateway_of(request).peers
        peers = directory.serving(name) if allows_name(name) else []
        if not peers:
            raise
        model_id = peers[0].names[name]
        serving = [p for p in peers if model_id in p.models]
        return JSONResponse(peer_model_object(model_id, serving or peers[:1]))
    return JSONResponse(_with_peers(request, model_object(handle)))
