"""``GET /v1/adapters``, ``POST /v1/adapters`` and ``DELETE /v1/adapters/{id}``:
the LoRA adapters of the language models, mounted and unmounted at run time (admin
endpoints).

A mount is kept by the gateway (the model's worker gets it whenever it starts) and,
when the worker runs, sent to it at once: the worker checks the adapter against the
model, so a folder that does not fit is a 400 and is not kept. A model that is not
running takes the mount when it next starts (``"mounted": false`` in the answer); an
adapter that fails there is left out with a warning in its log, and requests naming
it get a 400. The base model is never reloaded.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.protocol.kinds import ADAPTERS
from mlx_gateway.protocol.messages import MountAdapter, UnmountAdapter
from mlx_gateway.supervisor.config.kinds.lm import (
    adapter_folder_problem,
    adapter_id_problem,
)
from mlx_gateway.supervisor.engine.kinds import serves
from mlx_gateway.supervisor.errors import BadRequest, GatewayError
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.body import read_json
from mlx_gateway.supervisor.http.replies import JSONResponse
from mlx_gateway.supervisor.pool.adapters import Mounted
from mlx_gateway.supervisor.pool.model_handle import ModelHandle
from mlx_gateway.supervisor.pool.worker_call import WorkerCall

RUNNING = ("loading", "ready")
"""Public states in which a worker exists (or is about to) to send a mount to."""


class MountRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    model: str
    """The served name (or an alias) of a language model."""
    id: str
    """The adapter's id: what requests put in ``adapter``."""
    path: str
    """The folder ``mlx_lm.lora`` wrote (``adapter_config.json``,
    ``adapters.safetensors``), on the gateway's machine."""


def adapter_object(handle: ModelHandle, mounted: Mounted) -> dict[str, Any]:
    return {
        "id": mounted.id,
        "object": "adapter",
        "model": handle.name,
        "path": mounted.path,
        "source": mounted.source,
        "default": handle.adapters.default == mounted.id,
    }


async def list_adapters(request: Request) -> Response:
    """Every model's adapters, optionally of one model (``?model=``)."""
    registry = gateway_of(request).registry
    wanted = request.query_params.get("model")
    handles = [registry.resolve(wanted)] if wanted else list(registry.handles)
    data = [adapter_object(h, m) for h in handles for m in h.adapters]
    return JSONResponse({"object": "list", "data": data})


def _language_model(request: Request, name: str) -> ModelHandle:
    handle: ModelHandle = gateway_of(request).registry.resolve(name)
    if not serves(handle, ADAPTERS):
        raise BadRequest(
            f"LoRA adapters are served for language models (model_type lm); "
            f"'{handle.name}' is {handle.config.model_type}.",
            param="model",
        )
    return handle


async def mount_adapter(request: Request) -> Response:
    req = await read_json(request, MountRequest)
    handle = _language_model(request, req.model)
    if (why := adapter_id_problem(req.id)) is not None:
        raise BadRequest(f"{req.id!r} cannot be an adapter id: {why}.", param="id")
    path = os.path.abspath(os.path.expanduser(req.path))
    if (why := adapter_folder_problem(path)) is not None:
        raise BadRequest(f"{why}.", param="path")
    previous = next((m for m in handle.adapters if m.id == req.id), None)
    mounted = handle.adapters.add(req.id, path)
    sent = handle.status().state in RUNNING
    if sent:
        try:
            await _tell_worker(handle, MountAdapter(_request_id(), req.id, path))
        except GatewayError:
            handle.adapters.remove(req.id)
            if previous is not None:
                handle.adapters.add(previous.id, previous.path)
            raise
    body = adapter_object(handle, mounted) | {"mounted": sent}
    return JSONResponse(body)


async def unmount_adapter(request: Request) -> Response:
    adapter_id = request.path_params["adapter_id"]
    name = request.query_params.get("model")
    if not name:
        raise BadRequest(
            "Name the model the adapter is mounted on: DELETE /v1/adapters/{id}?model=<name>.",
            param="model",
        )
    handle = _language_model(request, name)
    if adapter_id not in handle.adapters:
        listed = ", ".join(m.id for m in handle.adapters) or "none"
        raise GatewayError(
            f"The adapter '{adapter_id}' is not mounted on model '{handle.name}' "
            f"(mounted: {listed}).",
            status=404,
            type="invalid_request_error",
            param="adapter_id",
            code="adapter_not_found",
        )
    if handle.status().state in RUNNING:
        await _tell_worker(handle, UnmountAdapter(_request_id(), adapter_id))
    mounted = handle.adapters.remove(adapter_id)
    return JSONResponse(adapter_object(handle, mounted) | {"deleted": True})


async def _tell_worker(handle: ModelHandle, msg: MountAdapter | UnmountAdapter) -> None:
    """Send a mount or unmount to the model's worker; its Error is raised."""
    async with WorkerCall(handle, msg, what="adapter change", code="adapter_failed") as call:
        async for _ in call:
            pass


def _request_id() -> str:
    return f"adapter-{uuid.uuid4().hex}"
