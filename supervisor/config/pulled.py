"""Models pulled at run time (Ollama's ``/api/pull``), kept across restarts
without touching the config file.

``$MLX_GATEWAY_CACHE_DIR/pulled.json`` (default ``~/.cache/mlx-gateway/``) lists
each pulled repo id with its kind, and the names ``/api/copy`` gave models
(aliases). Loading a config (at launch and on each reload) adds one on-demand
entry per pulled repo that the file does not already serve, served by its repo
id with default settings, as ``serve_hub_cache`` does, and the copied names as
aliases of the entries they name.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from mlx_gateway.store.cache import gateway_cache_dir
from mlx_gateway.store.ollama_store import PREFIX as OLLAMA_PREFIX
from mlx_gateway.store.ollama_store import OllamaName
from mlx_gateway.supervisor.config.hub_cache import _kind
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.config.schema import GatewayConfig, ModelConfig

log = logging.getLogger("mlx_gateway.config")

FILE_NAME = "pulled.json"
EMBEDDING_TYPES = ("bert", "xlm-roberta", "roberta", "modernbert", "nomic_bert")


def state_dir() -> Path:
    """The gateway's own cache folder (see :mod:`...store.cache`)."""
    return gateway_cache_dir()


def default_path() -> Path:
    return state_dir() / FILE_NAME


@dataclass
class PulledModels:
    """What ``pulled.json`` holds: ``models`` (repo id → kind) and ``copies``
    (name → the served name it is an alias of)."""

    models: dict[str, str] = field(default_factory=dict)
    copies: dict[str, str] = field(default_factory=dict)
    path: Path = field(default_factory=default_path)

    @classmethod
    def read(cls, path: Path | None = None) -> PulledModels:
        path = path or default_path()
        try:
            raw: Any = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return cls(path=path)
        except (OSError, ValueError) as exc:
            log.warning("ignoring %s: %s", path, exc)
            return cls(path=path)
        models = raw.get("models") if isinstance(raw, dict) else None
        copies = raw.get("copies") if isinstance(raw, dict) else None
        return cls(
            {str(k): str(v) for k, v in (models or {}).items()},
            {str(k): str(v) for k, v in (copies or {}).items()},
            path,
        )

    def write(self) -> None:
        """Replace the file in one step (a crash never leaves half a file)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps({"models": self.models, "copies": self.copies}, indent=2)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".pulled-")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(body)
        os.replace(tmp, self.path)


def kind_of_snapshot(repo_id: str, snapshot: Path) -> str | None:
    """The worker kind that serves a downloaded repo (``lm``, ``vlm``,
    ``embeddings``), or ``None`` when the gateway cannot tell."""
    kind = _kind(repo_id, snapshot)
    if kind is not None:
        return kind
    try:
        config: Any = json.loads((snapshot / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    model_type = str(config.get("model_type", "")).lower() if isinstance(config, dict) else ""
    has_weights = any(snapshot.glob("*.safetensors"))
    if has_weights and model_type in EMBEDDING_TYPES:
        return "embeddings"
    return None


def entry_for(repo_id: str, kind: str, idle_timeout: float = 300.0) -> ModelConfig:
    """A pulled model's entry: served by its repo id, or an ``ollama:`` name by the
    name (``ollama:llama3.2:latest`` as ``llama3.2``; clients may add ``:latest``),
    with the server's ``default_keep_alive`` as its ``idle_timeout``."""
    served = repo_id
    if repo_id.startswith(OLLAMA_PREFIX):
        served = OllamaName.parse(repo_id).served
    return model_entry(
        kind,
        model_path=repo_id,
        served_model_name=served,
        source="pulled",
        idle_timeout=idle_timeout,
    )


def with_pulled(config: GatewayConfig, pulled: PulledModels | None = None) -> GatewayConfig:
    """``config`` plus the pulled models it does not serve yet, and the copies'
    names as aliases (a name already served stays with its model)."""
    pulled = pulled or PulledModels.read()
    if not pulled.models and not pulled.copies:
        return config
    taken = {name for model in config.models for name in (*model.names, model.model_path)}
    models = list(config.models)
    for repo_id, kind in pulled.models.items():
        entry = entry_for(repo_id, kind, config.server.default_keep_alive)
        if repo_id not in taken and entry.served_model_name not in taken:
            models.append(entry)
            taken.update((repo_id, entry.served_model_name))
    for alias, target in pulled.copies.items():
        if alias in taken:
            continue
        for i, model in enumerate(models):
            if target in model.names:
                aliases = [*model.aliases, alias]
                models[i] = msgspec.structs.replace(model, aliases=aliases)
                taken.add(alias)
                break
    return msgspec.structs.replace(config, models=models)
