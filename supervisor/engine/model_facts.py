"""What a client may learn about a served model without loading it: its files'
facts (``config.json``, the weights' size on disk, when they changed), its context
window, what it can do (chat, embeddings, images in, thinking), and when its idle
worker will be stopped. Ollama's ``/api/tags``, ``/api/show`` and ``/api/ps`` are
written from these; nothing here is downloaded."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_gateway.protocol import kinds
from mlx_gateway.supervisor.engine.kinds import serves
from mlx_gateway.supervisor.engine.turns import reasoning_markers
from mlx_gateway.supervisor.pool.keep_alive import expires_at
from mlx_gateway.supervisor.pool.memory import model_dir, text_config, weights_on_disk
from mlx_gateway.supervisor.pool.model_files import configured_context_window
from mlx_gateway.supervisor.pool.model_handle import ModelHandle


@dataclass(frozen=True)
class ModelFiles:
    """A model's folder (``None``: not on this machine yet), its ``config.json``
    (text part) and its weights' bytes on disk."""

    folder: Path | None
    meta: dict[str, Any]
    weights: int

    def modified(self) -> float:
        """When the folder last changed (Unix time; 0 when unknown)."""
        try:
            return self.folder.stat().st_mtime if self.folder is not None else 0.0
        except OSError:
            return 0.0


def model_files(handle: ModelHandle) -> ModelFiles:
    folder = model_dir(handle.config.model_path)
    if folder is None:
        return ModelFiles(None, {}, 0)
    return ModelFiles(folder, text_config(folder), weights_on_disk(folder))


def thinks(handle: ModelHandle) -> bool:
    """Whether the model writes thinking blocks (its config's reasoning parser, else
    the markers its worker found in the chat template)."""
    return reasoning_markers(handle) is not None


def capabilities(handle: ModelHandle) -> list[str]:
    """Ollama's capability names, from the surfaces the model's kind serves."""
    if serves(handle, kinds.EMBEDDINGS):
        return ["embedding"]
    if not serves(handle, kinds.CHAT):
        return []
    found = ["completion", "tools"]
    if serves(handle, kinds.IMAGE_INPUT):
        found.append("vision")
    if thinks(handle):
        found.append("thinking")
    return found


def context_length(handle: ModelHandle) -> int | None:
    """The context its worker reported, else the one its config or files give."""
    if handle.facts is not None and handle.facts.context_length:
        return handle.facts.context_length
    return configured_context_window(handle.config)


def idle_until(handle: ModelHandle) -> float | None:
    """When its worker will be stopped if no request comes (``None``: never)."""
    return expires_at(handle)
