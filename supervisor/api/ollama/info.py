"""What Ollama's clients ask about models: ``GET /api/tags`` (every served name),
``POST /api/show`` (details, ``model_info``, ``capabilities``), ``GET /api/ps``
(loaded models, their memory and when they will be unloaded), ``GET /api/version``.

Facts come from the model's own files (``config.json``, its weights' size: nothing
is downloaded) and from what its worker reported once loaded.
"""

from __future__ import annotations

import hashlib
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.api.ollama.names import listed, resolve
from mlx_gateway.supervisor.api.ollama.replies import FOREVER, iso, ollama_errors
from mlx_gateway.supervisor.api.ollama.schemas import ModelRequest
from mlx_gateway.supervisor.engine.model_facts import (
    ModelFiles,
    capabilities,
    context_length,
    idle_until,
    model_files,
)
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http import JSONResponse, read_json
from mlx_gateway.supervisor.pool.model_handle import ModelHandle

OLLAMA_VERSION = "0.12.0"
"""The Ollama release whose API these routes follow (clients gate features on it)."""


def digest(handle: ModelHandle) -> str:
    """A stable id of the model's entry (Ollama's manifest digest has no equal here)."""
    key = f"{handle.config.model_path}\0{handle.name}"
    return hashlib.sha256(key.encode()).hexdigest()


def _parameters(meta: dict[str, Any], size: int) -> str:
    bits = (meta.get("quantization") or {}).get("bits") if isinstance(meta, dict) else None
    if not size:
        return ""
    count = size * 8 / (bits if isinstance(bits, int) and bits > 0 else 16)
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f}{unit}"
    return str(int(count))


def details(handle: ModelHandle, files: ModelFiles) -> dict[str, Any]:
    meta, size = files.meta, files.weights
    quant = meta.get("quantization")
    bits = quant.get("bits") if isinstance(quant, dict) else None
    family = str(meta.get("model_type") or handle.config.model_type)
    return {
        "parent_model": "",
        "format": "safetensors",
        "family": family,
        "families": [family],
        "parameter_size": _parameters(meta, size),
        "quantization_level": f"Q{bits}" if isinstance(bits, int) else "F16",
    }


def tag_entry(handle: ModelHandle, name: str) -> dict[str, Any]:
    files = model_files(handle)
    return {
        "name": listed(name),
        "model": listed(name),
        "modified_at": iso(files.modified()),
        "size": files.weights,
        "digest": digest(handle),
        "details": details(handle, files),
        "source": handle.config.source,
    }


@ollama_errors
async def tags(request: Request) -> Response:
    """``GET /api/tags``: every served name and alias, then every route's name,
    each as ``name:latest``."""
    registry = gateway_of(request).registry
    models = [
        tag_entry(handle, name) for handle in registry.visible() for name in handle.config.names
    ]
    # A route is listed by its name with its first model's details.
    models += [tag_entry(r.members[0], r.name) for r in registry.visible_routes() if r.members]
    return JSONResponse({"models": models})


@ollama_errors
async def show(request: Request) -> Response:
    """``POST /api/show``."""
    req = await read_json(request, ModelRequest)
    registry = gateway_of(request).registry
    route = registry.route(req.target) if req.target else None
    # A route (listed by /api/tags) shows its first model, as the tags list it.
    handle = route.members[0] if route is not None else resolve(registry, req.target)
    files = model_files(handle)
    meta = files.meta
    arch = str(meta.get("model_type") or handle.config.model_type)
    info: dict[str, Any] = {"general.architecture": arch}
    if (window := context_length(handle)) is not None:
        info[f"{arch}.context_length"] = window
    for key, ours in (
        ("hidden_size", "embedding_length"),
        ("num_hidden_layers", "block_count"),
        ("num_attention_heads", "attention.head_count"),
        ("vocab_size", "vocab_size"),
    ):
        if isinstance(meta.get(key), int):
            info[f"{arch}.{ours}"] = meta[key]
    return JSONResponse(
        {
            "modelfile": f"FROM {handle.config.model_path}\n",
            "parameters": "",
            "template": "",
            "details": details(handle, files),
            "model_info": info,
            "capabilities": capabilities(handle),
            "modified_at": iso(files.modified()),
        }
    )


@ollama_errors
async def ps(request: Request) -> Response:
    """``GET /api/ps``: the loaded models; ``size`` and ``size_vram`` are the
    memory its worker measured (unified memory: the same), ``expires_at`` when it
    will be unloaded if no request comes (far in the future when never)."""
    registry = gateway_of(request).registry
    models = []
    for handle in registry.visible():
        status = handle.status()
        if status.state != "ready":
            continue
        size = int(status.memory or status.memory_need or 0)
        expires = idle_until(handle)
        models.append(
            {
                "name": listed(handle.name),
                "model": listed(handle.name),
                "size": size,
                "size_vram": size,
                "digest": digest(handle),
                "details": details(handle, model_files(handle)),
                "expires_at": iso(expires) if expires is not None else FOREVER,
                "context_length": context_length(handle) or 0,
            }
        )
    return JSONResponse({"models": models})


async def version(request: Request) -> Response:
    """``GET /api/version``."""
    return JSONResponse({"version": OLLAMA_VERSION})
