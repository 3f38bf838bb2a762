"""``server.serve_ollama_library`` and ``server.serve_lmstudio_library``: the models
already on disk in Ollama's store and in LM Studio's folder, served in place.

* Ollama's store (``$OLLAMA_MODELS``, default ``~/.ollama/models``): every complete
  manifest with a GGUF layer, served by its Ollama name (``llama3.2``, listed by
  ``/api/tags`` as ``llama3.2:latest``) with ``model_path: ollama:<name>``; the
  worker reads the blob where it is and converts it into the gateway's cache (the
  only new file).
* LM Studio's folder (``downloadsFolder`` of ``~/.lmstudio/settings.json``, default
  ``~/.lmstudio/models``; the ``~/.lmstudio-home-pointer`` file moves
  ``~/.lmstudio``): ``<publisher>/<model>/`` folders. An MLX folder (``config.json``
  and safetensors) is served as it is by ``publisher/model``; each GGUF model in a
  folder (a file, or a split set's first part; vision projectors left out) is
  converted at its first load and served by ``publisher/model``, or by
  ``publisher/model/<file name without .gguf>`` when the folder holds several.

Only folders and manifests are read (no GGUF is opened); a model the config
already serves (by ``model_path``, name or alias) is not added twice.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import msgspec

from mlx_gateway.store.gguf_files import model_files
from mlx_gateway.store.ollama_store import ollama_models_dir, stored_models
from mlx_gateway.supervisor.config.hub_cache import _kind
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.config.schema import GatewayConfig, ModelConfig

log = logging.getLogger("mlx_gateway.config")


def ollama_library(store: Path | None = None) -> list[ModelConfig]:
    """One entry per model of Ollama's store, by name."""
    return [
        model_entry(
            "lm", model_path=name.model_path, served_model_name=name.served, source="ollama"
        )
        for name, _blob, _size in stored_models(store or ollama_models_dir())
    ]


def lmstudio_models_dir() -> Path:
    """LM Studio's models folder: its configured ``downloadsFolder``, else
    ``<LM Studio home>/models`` (``~/.lmstudio``, or where
    ``~/.lmstudio-home-pointer`` says)."""
    home = Path.home() / ".lmstudio"
    try:
        pointed = (Path.home() / ".lmstudio-home-pointer").read_text(encoding="utf-8").strip()
    except OSError:
        pointed = ""
    if pointed:
        home = Path(pointed).expanduser()
    try:
        settings: Any = json.loads((home / "settings.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        settings = {}
    folder = settings.get("downloadsFolder") if isinstance(settings, dict) else None
    return Path(folder).expanduser() if isinstance(folder, str) and folder else home / "models"


def _folder_entries(folder: Path, name: str) -> list[ModelConfig]:
    if (folder / "config.json").is_file():
        kind = _kind(name, folder, mlx_only=False)
        if kind is None:
            return []
        return [
            model_entry(kind, model_path=str(folder), served_model_name=name, source="lmstudio")
        ]
    files = model_files(folder)
    return [
        model_entry(
            "lm",
            model_path=str(file),
            served_model_name=name if len(files) == 1 else f"{name}/{file.name[:-5]}",
            source="lmstudio",
        )
        for file in files
    ]


def lmstudio_library(root: Path | None = None) -> list[ModelConfig]:
    """One entry per model of LM Studio's folder (``<publisher>/<model>/``)."""
    root = root or lmstudio_models_dir()
    found: list[ModelConfig] = []
    try:
        folders = sorted(p for p in root.glob("*/*") if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []
    for folder in folders:
        found.extend(_folder_entries(folder, f"{folder.parent.name}/{folder.name}"))
    return found


def with_libraries(config: GatewayConfig) -> GatewayConfig:
    """``config`` plus the libraries' models it does not serve yet; unchanged unless
    ``server.serve_ollama_library`` or ``server.serve_lmstudio_library``."""
    server = config.server
    candidates = [
        *(ollama_library() if server.serve_ollama_library else []),
        *(lmstudio_library() if server.serve_lmstudio_library else []),
    ]
    if not candidates:
        return config
    taken = {name for model in config.models for name in (*model.names, model.model_path)}
    added = []
    for entry in candidates:
        if entry.model_path in taken or entry.served_model_name in taken:
            continue
        taken.update((entry.model_path, entry.served_model_name))
        added.append(entry)
    if added:
        log.info(
            "libraries on disk: %d model(s): %s",
            len(added),
            ", ".join(f"{m.served_model_name} ({m.source})" for m in added),
        )
    return msgspec.structs.replace(config, models=[*config.models, *added])
