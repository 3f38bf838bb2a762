"""Ollama's ``options`` as the gateway's sampling fields.

Known generation options map onto :class:`SamplingFields`: ``num_predict``
(``max_tokens``; ``-1`` and ``-2`` mean no limit), ``temperature``, ``top_p``,
``top_k``, ``min_p``, ``seed``, ``stop``, ``repeat_penalty``
(``repetition_penalty``), ``presence_penalty``, ``frequency_penalty``. ``num_ctx``
is read and checked but changes nothing: a model's context is its own (or its
entry's ``context_length``). Options that tune llama.cpp (``num_gpu``,
``num_thread``, ``mirostat``, …) are ignored and logged once each, as Ollama
itself ignores options a runner does not know.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

import msgspec
from msgspec import Meta, Struct

from mlx_gateway.supervisor.engine.requests import INT32_MAX, SamplingFields
from mlx_gateway.supervisor.errors import BadRequest

log = logging.getLogger(__name__)

_logged: set[str] = set()


class Options(Struct, kw_only=True, forbid_unknown_fields=False):
    num_ctx: Annotated[int, Meta(ge=1, le=INT32_MAX)] | None = None
    num_predict: Annotated[int, Meta(ge=-2, le=INT32_MAX)] | None = None
    temperature: Annotated[float, Meta(ge=0.0)] | None = None
    top_p: Annotated[float, Meta(ge=0.0, le=1.0)] | None = None
    top_k: Annotated[int, Meta(ge=-1, le=INT32_MAX)] | None = None
    min_p: Annotated[float, Meta(ge=0.0, le=1.0)] | None = None
    seed: int | None = None
    stop: list[str] | str | None = None
    repeat_penalty: Annotated[float, Meta(ge=0.0)] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


KNOWN = frozenset(Options.__struct_fields__)


def read_options(raw: dict[str, Any] | None) -> Options:
    """``options`` checked: a known key of the wrong type is a 400 naming it."""
    if not raw:
        return Options()
    for key in raw:
        if key not in KNOWN and key not in _logged:
            _logged.add(key)
            log.info("ignoring the Ollama option '%s' (it has no meaning here)", key)
    try:
        return msgspec.convert(raw, Options)
    except msgspec.ValidationError as exc:
        text = str(exc).replace("$.", "options.")
        raise BadRequest(f"Invalid 'options': {text}", param="options") from None


def sampling_fields(model: str, options: Options) -> SamplingFields:
    """The :class:`SamplingFields` of ``options`` (the model's defaults fill the rest)."""
    max_tokens = options.num_predict
    if max_tokens is not None and max_tokens <= 0:
        if max_tokens == 0:
            raise BadRequest(
                "Invalid 'options': num_predict must be at least 1 (or -1 for no limit).",
                param="options",
            )
        max_tokens = None
    seed = options.seed
    if seed is not None and seed < 0:
        seed = None  # Ollama's -1: a random seed
    penalty = options.repeat_penalty
    return SamplingFields(
        model=model,
        max_tokens=max_tokens,
        temperature=options.temperature,
        top_p=options.top_p or None,
        top_k=options.top_k,
        min_p=options.min_p,
        seed=seed % 2**63 if seed is not None else None,
        repetition_penalty=penalty if penalty else None,
        presence_penalty=options.presence_penalty,
        frequency_penalty=options.frequency_penalty,
        stop=options.stop,
    )
