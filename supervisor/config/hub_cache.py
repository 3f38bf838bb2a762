"""``server.serve_hub_cache``: every MLX model already in the local Hugging Face
cache, served by its repo id with default settings (as mlx-vlm's ``/models``
lists them).

Only the cache's folders are read (``models--org--name/refs/main`` and that
snapshot's ``config.json``); nothing is downloaded. A repo counts as an MLX
model when its snapshot has ``config.json`` and ``*.safetensors`` weights and
either its id names MLX (``mlx-community/…``, ``…-mlx``) or its config carries
the ``quantization`` block MLX's converters write. Its kind: ``vlm`` when the
config has a ``vision_config``, ``lm`` otherwise; repos that are neither
(whisper, diffusion pipelines, sentence-transformers) are left out.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import msgspec

from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.config.schema import GatewayConfig

log = logging.getLogger("mlx_gateway.config")

_NOT_CHAT = ("whisper", "bert", "clip", "siglip", "t5", "roberta", "xlm")


def default_cache_dir() -> Path:
    """Where huggingface_hub keeps its cache (``HF_HUB_CACHE``, ``HF_HOME`` …)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def _snapshot(repo_dir: Path) -> Path | None:
    ref = repo_dir / "refs" / "main"
    snapshots = repo_dir / "snapshots"
    try:
        if ref.is_file():
            folder = snapshots / ref.read_text(encoding="utf-8").strip()
            return folder if folder.is_dir() else None
        found = sorted(p for p in snapshots.iterdir() if p.is_dir())
    except OSError:
        return None
    return found[-1] if found else None


def _kind(repo_id: str, snapshot: Path, *, mlx_only: bool = True) -> str | None:
    """``lm``, ``vlm``, or ``None`` (not an MLX chat model; ``mlx_only=False``: a
    folder known to hold MLX weights, as LM Studio's MLX folders do, whatever its
    name and config say)."""
    if (snapshot / "model_index.json").exists() or not any(snapshot.glob("*.safetensors")):
        return None
    try:
        config: Any = json.loads((snapshot / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    model_type = str(config.get("model_type", "")).lower()
    if not model_type or any(word in model_type for word in _NOT_CHAT):
        return None
    lowered = repo_id.lower()
    if mlx_only and "mlx" not in lowered and "quantization" not in config:
        return None
    return "vlm" if "vision_config" in config else "lm"


def cached_models(cache_dir: Path | None = None) -> list[tuple[str, str]]:
    """``(repo id, kind)`` of the MLX models in the cache, sorted by repo id."""
    root = cache_dir if cache_dir is not None else default_cache_dir()
    try:
        folders = sorted(root.iterdir())
    except OSError:
        return []
    found = []
    for folder in folders:
        if not folder.is_dir() or not folder.name.startswith("models--"):
            continue
        repo_id = folder.name.removeprefix("models--").replace("--", "/")
        snapshot = _snapshot(folder)
        kind = _kind(repo_id, snapshot) if snapshot is not None else None
        if kind is not None:
            found.append((repo_id, kind))
    return found


def with_hub_cache(config: GatewayConfig, cache_dir: Path | None = None) -> GatewayConfig:
    """``config`` plus one on-demand model per cached MLX repo not already served
    (by model path, name or alias); unchanged unless ``server.serve_hub_cache``."""
    if not config.server.serve_hub_cache:
        return config
    taken = {name for model in config.models for name in (*model.names, model.model_path)}
    added = [
        model_entry(
            kind,
            model_path=repo_id,
            served_model_name=repo_id,
            source="hub_cache",
            idle_timeout=config.server.default_keep_alive,
        )
        for repo_id, kind in cached_models(cache_dir)
        if repo_id not in taken
    ]
    if added:
        log.info(
            "serve_hub_cache: %d model(s) from the Hugging Face cache: %s",
            len(added),
            ", ".join(m.served_model_name for m in added),
        )
    return msgspec.structs.replace(config, models=[*config.models, *added])
