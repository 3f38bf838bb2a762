"""What a model's own files say before (and while) it runs: the sampling defaults of
its ``generation_config.json`` and the context window of its ``config.json``.

The gateway reads them from the model's folder (a local directory or the newest
snapshot in the Hugging Face cache; nothing is downloaded), so they are known before
the model first loads. A file is read again when it changes (a model pulled later).
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_gateway.protocol.kinds import CHAT, kind_serves
from mlx_gateway.supervisor.config import ModelConfig
from mlx_gateway.supervisor.pool.memory import model_dir, text_config

log = logging.getLogger(__name__)

GENERATION_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")
"""The sampling keys of ``generation_config.json`` the gateway takes (with
``max_new_tokens`` as ``max_tokens``, and ``do_sample: false`` as temperature 0)."""


@dataclass(frozen=True)
class SamplingDefaults:
    """A model's sampling defaults: its YAML entry's keys, else its
    ``generation_config.json``'s, else ``None`` (the gateway's own default)."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None


def _number(value: Any, *, whole: bool = False) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if whole and not (isinstance(value, int) or float(value).is_integer()):
        return None
    return int(value) if whole else float(value)


def _valid(key: str, value: float | int) -> bool:
    return {
        "temperature": 0 <= value <= 2,
        "top_p": 0 < value <= 1,
        "top_k": value >= 0,
        "min_p": 0 <= value <= 1,
        "repetition_penalty": value > 0,
        "max_tokens": value >= 1,
    }[key]


@functools.lru_cache(maxsize=128)
def _generation_config(path: str, mtime_ns: int) -> dict[str, float | int]:
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        log.warning("ignoring %s: %s", path, exc)
        return {}
    if not isinstance(raw, dict):
        return {}
    out: dict[str, float | int] = {}
    for key in GENERATION_KEYS:
        value = _number(raw.get(key), whole=key == "top_k")
        if value is not None and _valid(key, value):
            out[key] = value
        elif key in raw and raw[key] is not None:
            log.warning("ignoring %s=%r in %s: out of range", key, raw[key], path)
    max_new = _number(raw.get("max_new_tokens"), whole=True)
    if max_new is not None and _valid("max_tokens", max_new):
        out["max_tokens"] = max_new
    if raw.get("do_sample") is False:
        out["temperature"] = 0.0  # Hugging Face's greedy decoding
    return out


def generation_config(model_path: str) -> dict[str, float | int]:
    """The usable sampling keys of the model's ``generation_config.json`` (``{}`` when
    it has none, or its folder is not on this machine yet)."""
    folder = model_dir(model_path)
    if folder is None:
        return {}
    path = folder / "generation_config.json"
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return {}
    return _generation_config(str(path), mtime)


def sampling_defaults(config: ModelConfig) -> SamplingDefaults:
    """The model's defaults: each YAML key wins over ``generation_config.json``'s."""
    files = generation_config(config.model_path) if kind_serves(config.worker_kind, CHAT) else {}

    def pick(key: str) -> Any:
        mine = getattr(config, key)
        return mine if mine is not None else files.get(key)

    return SamplingDefaults(**{key: pick(key) for key in SamplingDefaults.__dataclass_fields__})


def configured_context_window(config: ModelConfig) -> int | None:
    """The context window before the model runs: its ``context_length`` key, else its
    ``config.json``'s ``max_position_embeddings`` (``None``: not known yet)."""
    if config.context_length == "auto":
        return None  # decided when its worker starts
    if config.context_length is not None:
        return config.context_length
    folder = model_dir(config.model_path)
    if folder is None:
        return None
    value = text_config(folder).get("max_position_embeddings")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
