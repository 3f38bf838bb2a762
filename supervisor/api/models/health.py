"""``GET /health``: the gateway answers, and how each model is doing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.supervisor.api.models.routes import memory_summary
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http.replies import JSONResponse
from mlx_gateway.supervisor.pool.blas import find_openblas
from mlx_gateway.supervisor.pool.model_handle import ModelHandle


async def health(request: Request) -> Response:
    """``{"status": "ok", "blas": {...}, "memory": {...}, "models": {name: status}}``;
    ``memory`` is the budget, reserved and free bytes (each model's status has its
    ``memory_need`` and ``memory_need_source``). 200 while the
    gateway runs, whatever the models' states (a failed model shows ``"state":
    "failed"``). ``blas`` tells whether workers get OpenBLAS preloaded (the path
    found, ``null`` when none is or the switch is off); each ready model's
    ``blas`` is what its worker actually computes with. With ``server.spare_workers``,
    ``spares`` lists the spare workers (kind, pid, ready, memory). With ``server.peers``,
    ``peers`` lists each peer's state (``up``/``down``, its models, the requests in
    flight there from this gateway, the last check's error). ``loaded_model`` and
    ``loaded_adapter`` are the fields of mlx-vlm's server: the ``model_path`` of the
    ready model used last (``null`` when none is ready) and the folder of the LoRA
    adapter its latest request ran with (``null``: the base model; stacked adapters'
    folders joined with ``+``)."""
    registry = gateway_of(request).registry
    handles = registry.handles
    body: dict[str, Any] = {
        "status": "ok",
        "blas": _gateway_blas(registry),
        "memory": memory_summary(registry),
        "models": {h.name: h.status().public() for h in handles},
        **_loaded(handles),
    }
    if (spares := getattr(registry, "spares", None)) is not None:
        body["spares"] = spares.status()
    directory = gateway_of(request).peers
    if directory.peers:
        body["peers"] = directory.status()
    return JSONResponse(body)


def _gateway_blas(registry: Any) -> dict[str, Any]:
    preload = registry.config.server.preload_openblas
    return {"preload_openblas": preload, "openblas": find_openblas() if preload else None}


def _loaded(handles: Sequence[ModelHandle]) -> dict[str, Any]:
    """mlx-vlm's fields: the ``model_path`` of the ready model used last (``None``
    when none is ready), and the adapter folder(s) of its latest request."""
    ready = [(h, h.status()) for h in handles]
    ready = [(h, s) for h, s in ready if s.state == "ready"]
    last = max(ready, key=lambda hs: hs[1].last_used or 0.0, default=(None, None))[0]
    adapter = None
    if last is not None and last.adapters.last_used:
        paths = {m.id: m.path for m in last.adapters}
        adapter = "+".join(paths.get(i, i) for i in last.adapters.last_used.split("+"))
    return {"loaded_model": last.config.model_path if last else None, "loaded_adapter": adapter}
