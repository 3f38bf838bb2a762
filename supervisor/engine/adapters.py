"""The ``adapter`` field of a generation request: which LoRA adapters of the model
run it (``"id"``, ``"a+b"`` stacked, ``"none"``; absent: the model's default from
``adapter_path``, else none). Checked here, before any worker is asked."""

from __future__ import annotations

from mlx_gateway.protocol.kinds import ADAPTERS
from mlx_gateway.supervisor.config.kinds.lm import ADAPTER_NONE
from mlx_gateway.supervisor.engine.kinds import serves
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.pool.adapters import UnknownAdapter
from mlx_gateway.supervisor.pool.model_handle import ModelHandle


def adapters_for(handle: ModelHandle, requested: str | None) -> list[str]:
    """The adapter ids of a request to ``handle``; a 400 (``param`` ``adapter``)
    for one the model does not serve."""
    if requested is not None and requested.strip() != ADAPTER_NONE and not serves(handle, ADAPTERS):
        raise BadRequest(
            f"LoRA adapters are served for language models (model_type lm); "
            f"'{handle.name}' is {handle.config.model_type}. Leave 'adapter' out.",
            param="adapter",
        )
    try:
        ids = handle.adapters.resolve(requested)
    except UnknownAdapter as exc:
        raise BadRequest(str(exc), param="adapter") from None
    handle.adapters.last_used = "+".join(ids) or None
    return ids
