"""From a request's sampling fields and the model's defaults to :class:`SamplingParams`."""

from __future__ import annotations

from typing import Protocol, TypeVar

from mlx_gateway.protocol.messages import SamplingParams
from mlx_gateway.supervisor.config import ModelConfig
from mlx_gateway.supervisor.config.text import TextModelConfig
from mlx_gateway.supervisor.engine.requests import ChatCompletionRequest, SamplingFields
from mlx_gateway.supervisor.pool.model_files import sampling_defaults

T = TypeVar("T")


class ModelDefaults(Protocol):
    """The per-model sampling defaults of a ``ModelConfig`` (``None`` = unset)."""

    @property
    def max_tokens(self) -> int | None: ...
    @property
    def temperature(self) -> float | None: ...
    @property
    def top_p(self) -> float | None: ...
    @property
    def top_k(self) -> int | None: ...
    @property
    def min_p(self) -> float | None: ...
    @property
    def repetition_penalty(self) -> float | None: ...


def _first(*values: T | None, default: T) -> T:
    for value in values:
        if value is not None:
            return value
    return default


def sampling_params(req: SamplingFields, defaults: ModelDefaults) -> SamplingParams:
    """The request's sampling settings, each falling back to the model's default
    when the request leaves it out (``max_completion_tokens`` wins over ``max_tokens``).
    A model's defaults are its YAML entry's keys, else its ``generation_config.json``'s;
    its ``max_tokens_overflow`` says whether the worker may cut ``max_tokens`` to fit."""
    fit = isinstance(defaults, TextModelConfig) and defaults.max_tokens_overflow == "clamp"
    if isinstance(defaults, ModelConfig):
        defaults = sampling_defaults(defaults)
    max_tokens = req.max_tokens
    if isinstance(req, ChatCompletionRequest) and req.max_completion_tokens is not None:
        max_tokens = req.max_completion_tokens
    top_k = _first(req.top_k, defaults.top_k, default=0)
    stop = req.stop if isinstance(req.stop, list) else [req.stop] if req.stop else []
    return SamplingParams(
        max_tokens=_first(max_tokens, defaults.max_tokens, default=None),
        temperature=_first(req.temperature, defaults.temperature, default=1.0),
        top_p=_first(req.top_p, defaults.top_p, default=1.0),
        top_k=max(top_k, 0),
        min_p=_first(req.min_p, defaults.min_p, default=0.0),
        repetition_penalty=_first(
            req.repetition_penalty, defaults.repetition_penalty, default=None
        ),
        presence_penalty=_first(req.presence_penalty, default=0.0),
        frequency_penalty=_first(req.frequency_penalty, default=0.0),
        seed=req.seed,
        stop=stop,
        fit_max_tokens=fit,
    )
