"""Ollama's model names and its store on disk (no MLX here: the gateway reads it too).

A name is ``[host/][namespace/]model[:tag]``: ``llama3.2`` is
``registry.ollama.ai/library/llama3.2:latest``. A store is a folder laid out as
Ollama's own (``$OLLAMA_MODELS``, default ``~/.ollama/models``):
``manifests/<host>/<namespace>/<model>/<tag>`` is a registry manifest (JSON) whose
layers name blobs ``blobs/sha256-<hex>``; the layer of media type
:data:`MODEL_LAYER` is the GGUF. The gateway keeps the models it pulls by such
names in a store of its own (``<gateway cache>/ollama``), and reads Ollama's in
place.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_gateway.store.cache import gateway_cache_dir

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
PREFIX = "ollama:"
"""How a ``model_path`` names an Ollama model: ``ollama:qwen3:4b``."""
MODEL_LAYER = "application/vnd.ollama.image.model"
PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]+)?$")


@dataclass(frozen=True)
class OllamaName:
    """One model of a registry: ``host/namespace/model:tag``."""

    host: str
    namespace: str
    model: str
    tag: str

    @classmethod
    def parse(cls, text: str) -> OllamaName:
        """``text`` as a name (``ollama:`` in front is allowed); ``ValueError`` when it
        is not one."""
        raw = text.removeprefix(PREFIX).strip()
        path, tag = raw, DEFAULT_TAG
        head, _, last = raw.rpartition("/")
        if ":" in last:
            last, _, tag = last.partition(":")
            path = f"{head}/{last}" if head else last
        parts = path.split("/")
        if len(parts) == 1:
            parts = [DEFAULT_HOST, DEFAULT_NAMESPACE, *parts]
        elif len(parts) == 2:
            parts = [DEFAULT_HOST, *parts]
        if (
            len(parts) != 3
            or not HOST.match(parts[0])
            or not all(PART.match(p) for p in (*parts[1:], tag))
        ):
            raise ValueError(
                f"'{text}' is not an Ollama model name ([host/][namespace/]model[:tag], such "
                "as llama3.2 or qwen3:4b)"
            )
        return cls(parts[0], parts[1], parts[2], tag)

    @property
    def display(self) -> str:
        """The name as Ollama shows it: ``llama3.2:latest``, ``user/model:tag``."""
        if self.host != DEFAULT_HOST:
            return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"
        if self.namespace != DEFAULT_NAMESPACE:
            return f"{self.namespace}/{self.model}:{self.tag}"
        return f"{self.model}:{self.tag}"

    @property
    def served(self) -> str:
        """The name the gateway serves it by: :attr:`display` without ``:latest``
        (clients may send either)."""
        return self.display.removesuffix(f":{DEFAULT_TAG}")

    @property
    def model_path(self) -> str:
        return PREFIX + self.display


def looks_like_ollama(name: str) -> bool:
    """Whether a pull of ``name`` means Ollama's registry rather than the Hugging Face
    hub: ``ollama:…``, a bare name (a hub id always has ``org/``), ``library/…``, a
    tag, or a host in front. ``org/name`` alone stays a hub repo id."""
    if name.startswith(PREFIX):
        return True
    head, _, last = name.rpartition("/")
    return not head or head == DEFAULT_NAMESPACE or ":" in last or head.count("/") == 1


def ollama_models_dir() -> Path:
    """Ollama's own store: ``$OLLAMA_MODELS``, else ``~/.ollama/models``."""
    if configured := os.environ.get("OLLAMA_MODELS"):
        return Path(configured).expanduser()
    return Path.home() / ".ollama" / "models"


def own_store() -> Path:
    """The gateway's store of the models it pulls by Ollama names."""
    return gateway_cache_dir() / "ollama"


def manifest_file(store: Path, name: OllamaName) -> Path:
    return store / "manifests" / name.host / name.namespace / name.model / name.tag


def blob_file(store: Path, digest: str) -> Path:
    """``blobs/sha256-<hex>`` for the digest ``sha256:<hex>``."""
    return store / "blobs" / digest.replace(":", "-")


def model_layer(manifest: Any) -> dict[str, Any] | None:
    """The GGUF layer of a manifest (``digest``, ``size``), if it has one."""
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    for layer in layers or []:
        if isinstance(layer, dict) and layer.get("mediaType") == MODEL_LAYER:
            return layer
    return None


def read_manifest(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def find_blob(name: OllamaName, stores: list[Path] | None = None) -> Path | None:
    """The GGUF blob of ``name`` in the first store that has it whole."""
    for store in stores if stores is not None else [own_store(), ollama_models_dir()]:
        layer = model_layer(read_manifest(manifest_file(store, name)))
        if layer is None:
            continue
        blob = blob_file(store, str(layer.get("digest", "")))
        if blob.is_file() and blob.stat().st_size == int(layer.get("size") or 0):
            return blob
    return None


def stored_models(store: Path) -> list[tuple[OllamaName, Path, int]]:
    """``(name, GGUF blob, bytes)`` of every complete model in ``store``, by name."""
    root = store / "manifests"
    found = []
    try:
        files = sorted(p for p in root.glob("*/*/*/*") if p.is_file())
    except OSError:
        return []
    for path in files:
        host, namespace, model, tag = path.relative_to(root).parts
        try:
            name = OllamaName(host, namespace, model, tag)
            OllamaName.parse(name.display)
        except ValueError:
            continue
        layer = model_layer(read_manifest(path))
        if layer is None:
            continue
        blob = blob_file(store, str(layer.get("digest", "")))
        if blob.is_file():
            found.append((name, blob, blob.stat().st_size))
    return found


def _digests(manifest: Any) -> set[str]:
    layers = manifest.get("layers") if isinstance(manifest, dict) else None
    return {str(layer.get("digest")) for layer in layers or [] if isinstance(layer, dict)}


def remove_model(store: Path, name: OllamaName) -> list[str]:
    """Remove ``name``'s manifest from ``store`` and the blobs no other manifest
    there names; returns the digests (``sha256:…``) of the blobs removed."""
    path = manifest_file(store, name)
    digests = _digests(read_manifest(path))
    path.unlink(missing_ok=True)
    for folder in (path.parent, path.parent.parent):  # empty model and namespace folders
        try:
            folder.rmdir()
        except OSError:
            break
    still: set[str] = set()
    for other in (store / "manifests").glob("*/*/*/*"):
        still |= _digests(read_manifest(other))
    removed = sorted(digests - still)
    for digest in removed:
        blob_file(store, digest).unlink(missing_ok=True)
    return removed
