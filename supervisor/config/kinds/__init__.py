"""Each kind's settings, one module per kind: ``config/kinds/<kind>.py`` declares the
Struct of its entries (a subclass of :class:`..entry.ModelConfig` tagged with its
``model_type``, one per ``model_type`` of its row in ``protocol/kinds.py``) and
lists them as ``ENTRIES``.

This package gathers them into the tagged union a ``models:`` entry is decoded as
(:data:`ModelEntry`): msgspec picks the Struct by the entry's ``model_type``, and a
key the Struct lacks is refused. A new kind with settings of its own is its row in
the kind table, its module here and its worker package; nothing else names it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, TypeVar, Union

from mlx_gateway.protocol.kinds import KINDS
from mlx_gateway.supervisor.config.entry import ModelConfig

_E = TypeVar("_E", bound=ModelConfig)


def _entry_types() -> dict[str, type[ModelConfig]]:
    """``model_type`` → its Struct, from every kind's module, checked against the
    kind table."""
    found: dict[str, type[ModelConfig]] = {}
    for kind in KINDS.values():
        module = importlib.import_module(f"{__name__}.{kind.name}")
        structs: tuple[type[ModelConfig], ...] = module.ENTRIES
        tags = tuple(struct.__struct_config__.tag for struct in structs)
        if tags != kind.model_types:
            raise TypeError(
                f"{module.__name__}.ENTRIES are tagged {tags}, and the kind table gives "
                f"kind {kind.name!r} the model_types {kind.model_types}; make them agree"
            )
        found.update(zip(kind.model_types, structs, strict=True))
    return found


ENTRY_TYPES: dict[str, type[ModelConfig]] = _entry_types()
"""Every ``model_type`` a config may name, with the Struct of its entries."""

if TYPE_CHECKING:
    ModelEntry = ModelConfig
else:
    ModelEntry = Union[tuple(ENTRY_TYPES.values())]  # noqa: UP007 (built at run time)
"""What a ``models:`` entry decodes as: the union of every kind's Structs."""


def entry_type(model_type: str) -> type[ModelConfig]:
    """The Struct of ``model_type``'s entries (``KeyError`` for an unknown one)."""
    return ENTRY_TYPES[model_type]


def model_entry(model_type: str = "lm", **fields: Any) -> ModelConfig:
    """A model entry of ``model_type`` with ``fields`` (unchecked: for entries the
    gateway makes itself, such as the hub cache's and the pulled models')."""
    return entry_type(model_type)(**fields)


def model_types_taking(key: str) -> tuple[str, ...]:
    """The ``model_type`` values whose entries accept ``key``, in table order."""
    return tuple(
        model_type for model_type, struct in ENTRY_TYPES.items() if key in struct.__struct_fields__
    )


def entry_keys() -> frozenset[str]:
    """Every key some kind's entries accept."""
    return frozenset(key for struct in ENTRY_TYPES.values() for key in struct.__struct_fields__)


def settings_as(config: ModelConfig, struct: type[_E]) -> _E:
    """``config`` as ``struct`` (a kind's Struct, or :class:`..text.TextModelConfig`),
    for code that serves only those kinds and has checked the model's kind already
    (``engine.kinds.require_kind``); anything else is a gateway bug."""
    if not isinstance(config, struct):
        raise TypeError(
            f"model {config.served_model_name!r} (model_type {config.model_type}) has no "
            f"{struct.__name__} settings; its kind was not checked before they were read"
        )
    return config
