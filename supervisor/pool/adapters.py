"""The LoRA adapters a language model serves: those of its config entry and those
mounted at run time (``POST /v1/adapters``). The gateway keeps the set, so a worker
that is reaped, evicted or restarted comes back with the same adapters (they are in
its spec's options); the worker keeps the weights (``workers/adapters.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from mlx_gateway.supervisor.config import ModelConfig
from mlx_gateway.supervisor.config.kinds.lm import ADAPTER_NONE as NONE
from mlx_gateway.supervisor.config.kinds.lm import DEFAULT_ADAPTER as DEFAULT_ID
from mlx_gateway.supervisor.config.kinds.lm import LmConfig


@dataclass(frozen=True)
class Mounted:
    id: str
    path: str
    source: str
    """``config`` (the YAML entry) or ``runtime`` (mounted through the API)."""


class UnknownAdapter(Exception):
    """A request named an adapter the model does not serve."""

    def __init__(self, model: str, adapter_id: str, mounted: list[str]) -> None:
        listed = ", ".join(mounted) if mounted else "none"
        super().__init__(
            f"The adapter '{adapter_id}' is not mounted on model '{model}' (mounted: "
            f"{listed}); mount it with POST /v1/adapters, or send 'adapter': 'none' for "
            "the base model."
        )


class AdapterSet:
    """One model's adapters, in the order they were mounted."""

    def __init__(self, config: ModelConfig) -> None:
        self.model = config.served_model_name
        self._mounted: dict[str, Mounted] = {}
        self.default: str | None = None
        if isinstance(config, LmConfig):  # only language models take adapters
            if config.adapter_path is not None:
                self._mounted[DEFAULT_ID] = Mounted(DEFAULT_ID, config.adapter_path, "config")
                self.default = DEFAULT_ID
            for adapter_id, path in config.adapters.items():
                self._mounted[adapter_id] = Mounted(adapter_id, path, "config")
        """Applied to requests that do not name an adapter (``adapter_path``)."""
        self.last_used: str | None = None
        """The adapters of the latest request (``a+b``; ``None``: the base model)."""

    def __iter__(self) -> Iterator[Mounted]:
        return iter(list(self._mounted.values()))

    def __len__(self) -> int:
        return len(self._mounted)

    def __contains__(self, adapter_id: object) -> bool:
        return adapter_id in self._mounted

    def paths(self) -> dict[str, str]:
        """Id → folder, for the worker's spec."""
        return {m.id: m.path for m in self._mounted.values()}

    def add(self, adapter_id: str, path: str) -> Mounted:
        mounted = Mounted(adapter_id, path, "runtime")
        self._mounted[adapter_id] = mounted
        return mounted

    def remove(self, adapter_id: str) -> Mounted:
        mounted = self._mounted.pop(adapter_id)
        if self.default == adapter_id:
            self.default = None
        return mounted

    def resolve(self, requested: str | None) -> list[str]:
        """The adapter ids a request's ``adapter`` field names: ``"id"``, ``"a+b"``
        (stacked), ``"none"`` (the base model) or absent (the default adapter, if
        ``adapter_path`` set one). Raises :class:`UnknownAdapter`."""
        if requested is None:
            return [self.default] if self.default is not None else []
        if requested.strip() == NONE:
            return []
        ids = [part.strip() for part in requested.split("+")]
        for adapter_id in ids:
            if adapter_id not in self._mounted:
                raise UnknownAdapter(self.model, adapter_id, list(self._mounted))
        return list(dict.fromkeys(ids))
