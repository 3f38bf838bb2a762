"""LoRA adapters mounted beside a loaded language model, chosen per request.

An adapter is mlx-lm's fine-tuning output: a folder with ``adapter_config.json``
(``fine_tune_type: lora`` and ``lora_parameters.scale``) and
``adapters.safetensors``, whose ``<layer>.lora_a`` (``in x rank``) and
``<layer>.lora_b`` (``rank x out``) low-rank matrices add
``scale · (x @ lora_a) @ lora_b`` to the output of ``<layer>``, a linear layer of
the model (quantized or not).

The base weights are never touched or reloaded. The first adapter that targets a
layer wraps it, once, in a :class:`SwitchedLora` that calls the original layer and
adds the deltas of the adapters *active now*: :meth:`Adapters.activate` switches the
whole model to another set (one adapter, several stacked — their deltas summed — or
none) in one pass over the wrapped layers. Every row of mlx-lm's batch runs the same
weights, so the lm worker runs requests of one adapter set at a time and switches
between groups (see :mod:`.scheduling`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
import mlx.nn as nn

from mlx_gateway.protocol.messages import MountAdapter, UnmountAdapter
from mlx_gateway.workers.runtime.contract import RequestError

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapters.safetensors"


@dataclass
class Adapter:
    """One mounted adapter: its folder, its scale and its matrices per layer."""

    id: str
    path: str
    scale: float
    layers: dict[str, tuple[mx.array, mx.array]]
    """Layer path (``model.layers.3.self_attn.q_proj``) → ``(lora_a, lora_b)``."""
    identity: str = ""
    """Its folder and its weight file's size and time: what a saved KV cache computed
    with it depends on (the prompt cache's disk tier keys its files with it)."""


class SwitchedLora(nn.Module):
    """A linear layer of the model plus the deltas of the active adapters."""

    def __init__(self, base: nn.Module) -> None:
        super().__init__()
        self.base = base
        # Kept off the module tree (a tuple would be registered as parameters).
        object.__setattr__(self, "_deltas", ())

    def use(self, deltas: Sequence[tuple[mx.array, mx.array, float]]) -> None:
        object.__setattr__(self, "_deltas", tuple(deltas))

    def __call__(self, x: mx.array) -> mx.array:
        y = self.base(x)
        for a, b, scale in self._deltas:
            y = y + (scale * ((x @ a) @ b)).astype(x.dtype)
        return y


def _shape_of(layer: nn.Module) -> tuple[int, int] | None:
    """``(input dims, output dims)`` of a linear layer, quantized or not."""
    if isinstance(layer, nn.QuantizedLinear):
        out_dims = int(layer.weight.shape[0])
        return int(layer.scales.shape[-1]) * layer.group_size, out_dims
    if isinstance(layer, nn.Linear):
        out_dims, in_dims = (int(n) for n in layer.weight.shape)
        return in_dims, out_dims
    return None


def read_adapter(adapter_id: str, folder: str) -> Adapter:
    """The adapter in ``folder`` (mlx-lm's format); :class:`RequestError` naming what
    is wrong with it."""
    path = Path(folder).expanduser()
    config_file, weights_file = path / CONFIG_FILE, path / WEIGHTS_FILE
    if not config_file.is_file() or not weights_file.is_file():
        raise RequestError(
            f"adapter {adapter_id!r}: {path} must be a folder holding {CONFIG_FILE} and "
            f"{WEIGHTS_FILE} (what mlx_lm.lora writes with --adapter-path)",
            param="path",
        )
    try:
        config = json.loads(config_file.read_text())
        weights = cast(dict[str, mx.array], mx.load(str(weights_file)))
    except (OSError, ValueError, RuntimeError) as exc:
        raise RequestError(f"adapter {adapter_id!r}: cannot read {path}: {exc}") from None
    kind = config.get("fine_tune_type", "lora")
    if kind != "lora":
        raise RequestError(
            f"adapter {adapter_id!r}: fine_tune_type {kind!r} is not served (LoRA only); "
            "fuse it into a model with mlx_lm.fuse and serve that model instead",
            param="path",
        )
    scale = (config.get("lora_parameters") or {}).get("scale")
    if not isinstance(scale, int | float) or isinstance(scale, bool):
        raise RequestError(
            f"adapter {adapter_id!r}: {CONFIG_FILE} has no numeric lora_parameters.scale",
            param="path",
        )
    pairs: dict[str, dict[str, mx.array]] = {}
    for name, value in weights.items():
        layer, _, leaf = name.rpartition(".")
        if leaf not in ("lora_a", "lora_b"):
            raise RequestError(
                f"adapter {adapter_id!r}: {WEIGHTS_FILE} holds {name!r}, which is not a "
                "LoRA matrix (lora_a / lora_b)",
                param="path",
            )
        pairs.setdefault(layer, {})[leaf] = value
    layers = {}
    for layer, pair in pairs.items():
        if set(pair) != {"lora_a", "lora_b"}:
            raise RequestError(
                f"adapter {adapter_id!r}: layer {layer!r} has only {', '.join(pair)}",
                param="path",
            )
        layers[layer] = (pair["lora_a"], pair["lora_b"])
    if not layers:
        raise RequestError(f"adapter {adapter_id!r}: {WEIGHTS_FILE} is empty", param="path")
    info = weights_file.stat()
    identity = f"{path.resolve()}:{info.st_size}:{info.st_mtime_ns}:{scale}"
    return Adapter(adapter_id, str(path), float(scale), layers, identity)


class Adapters:
    """The adapters mounted on one model, and which of them are active."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.mounted: dict[str, Adapter] = {}
        self.active: tuple[str, ...] = ()
        self._wrapped: dict[str, SwitchedLora] = {}

    def mount(self, adapter: Adapter) -> None:
        """Add (or replace) ``adapter``; checked against the model's layers first, so
        a bad one changes nothing."""
        modules = dict(self.model.named_modules())
        for layer, (a, b) in adapter.layers.items():
            module = modules.get(layer)
            if isinstance(module, SwitchedLora):
                module = module.base
            shape = _shape_of(module) if module is not None else None
            if shape is None:
                what = "no such layer" if module is None else type(module).__name__
                raise RequestError(
                    f"adapter {adapter.id!r} targets {layer!r}, which this model has not as a "
                    f"linear layer ({what}): it was trained for another model",
                    param="path",
                )
            in_dims, out_dims = shape
            if a.ndim != 2 or b.ndim != 2 or a.shape[0] != in_dims or b.shape[1] != out_dims:
                raise RequestError(
                    f"adapter {adapter.id!r}: {layer} is {in_dims} → {out_dims} in this model, "
                    f"but its lora_a is {tuple(a.shape)} and lora_b {tuple(b.shape)}: it was "
                    "trained for another model",
                    param="path",
                )
            if a.shape[1] != b.shape[0]:
                raise RequestError(
                    f"adapter {adapter.id!r}: {layer}'s lora_a and lora_b ranks differ",
                    param="path",
                )
        for layer in adapter.layers:
            if layer not in self._wrapped:
                self._wrapped[layer] = self._wrap(layer)
        self.mounted[adapter.id] = adapter
        self.activate(self.active)

    def identity(self, space: str) -> str:
        """What the KV caches of the adapter set ``space`` (``a+b``) depend on."""
        return "+".join(self.mounted[i].identity for i in space.split("+") if i in self.mounted)

    def unmount(self, adapter_id: str) -> None:
        del self.mounted[adapter_id]
        self.activate(tuple(i for i in self.active if i != adapter_id))

    def activate(self, ids: tuple[str, ...]) -> None:
        """Make ``ids`` (mounted ones) the adapters every forward pass applies."""
        chosen = [self.mounted[i] for i in ids]
        for layer, wrapper in self._wrapped.items():
            wrapper.use(
                [
                    (*adapter.layers[layer], adapter.scale)
                    for adapter in chosen
                    if layer in adapter.layers
                ]
            )
        self.active = ids

    def ids(self, requested: list[str]) -> tuple[str, ...]:
        """The adapters a request names, each mounted, in order, once."""
        ids = tuple(dict.fromkeys(requested))
        unknown = [i for i in ids if i not in self.mounted]
        if unknown:
            mounted = ", ".join(sorted(self.mounted)) or "none"
            raise RequestError(
                f"adapter {unknown[0]!r} is not mounted on this model (mounted: {mounted})",
                param="adapter",
            )
        return ids

    def apply(self, request: MountAdapter | UnmountAdapter, users: int) -> str:
        """Mount or unmount the adapter of ``request``, refused while ``users`` running
        or waiting requests use it; the finish reason of its ``Done``."""
        if isinstance(request, MountAdapter):
            if users:
                raise RequestError(
                    f"adapter {request.adapter_id!r} is in use by running or waiting "
                    "requests; mount the new one under another id, or retry when they end",
                    status=409,
                    type="conflict",
                )
            self.mount(read_adapter(request.adapter_id, request.path))
            return "mounted"
        if request.adapter_id not in self.mounted:
            mounted = ", ".join(sorted(self.mounted)) or "none"
            raise RequestError(
                f"adapter {request.adapter_id!r} is not mounted (mounted: {mounted})",
                status=404,
                type="not_found_error",
            )
        if users:
            raise RequestError(
                f"adapter {request.adapter_id!r} is in use by {users} running or waiting "
                "request(s); retry when they end",
                status=409,
                type="conflict",
            )
        self.unmount(request.adapter_id)
        return "unmounted"

    def _wrap(self, layer: str) -> SwitchedLora:
        *parents, leaf = layer.split(".")
        owner: Any = self.model
        for part in parents:
            owner = owner[int(part)] if isinstance(owner, list) else owner[part]
        wrapper = SwitchedLora(owner[leaf])
        owner[leaf] = wrapper
        return wrapper
