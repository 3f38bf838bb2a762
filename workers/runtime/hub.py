"""Turn a spec's ``model_path`` (local directory or Hugging Face repo id) into a
local directory, with load errors a person can act on.

Every failure raises :class:`LoadError` whose message is what the gateway shows
to clients (HTTP 503) and in ``/health``, so it names the model, the path and
what is missing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from mlx_gateway.workers.runtime.contract import LoadError
from mlx_gateway.workers.runtime.download import progress_tqdm_class

log = logging.getLogger(__name__)

# What mlx-lm's own downloader fetches (mlx_lm.utils.DEFAULT_ALLOW_PATTERNS);
# copied so that resolving a path does not import mlx-lm (3 s of transformers).
ALLOW_PATTERNS = [
    "*.json",
    "model*.safetensors",
    "*.py",
    "tokenizer.model",
    "*.tiktoken",
    "tiktoken.model",
    "*.txt",
    "*.jsonl",
    "*.jinja",
]


def check_model_dir(path: Path, weights: str = "*.safetensors") -> None:
    """Raise :class:`LoadError` unless ``path`` looks like an MLX model directory."""
    if not path.is_dir():
        raise LoadError(f"model path '{path}' is not a directory")
    if not (path / "config.json").is_file():
        raise LoadError(f"model directory '{path}' has no config.json")
    if not any(path.glob(weights)):
        raise LoadError(
            f"model directory '{path}' has no weights ({weights}); MLX loads "
            "safetensors (convert a checkpoint with mlx_lm.convert)"
        )


def _hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def resolve_model_path(
    model_path: str,
    on_download: Callable[[str], None] = lambda repo: None,
    allow_patterns: list[str] | None = None,
    weights: str = "*.safetensors",
) -> Path:
    """A local directory for ``model_path``: the directory itself, the Hugging Face
    cache's snapshot, or a fresh download (``on_download(repo_id)`` is called first).
    ``weights`` is the glob a complete model directory has files for."""
    local = Path(model_path).expanduser()
    if local.exists():
        check_model_dir(local, weights)
        return local

    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
    )
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(model_path)
    except HFValidationError:
        raise LoadError(
            f"model path '{model_path}' does not exist (and it is not a Hugging Face repo id)"
        ) from None

    patterns = allow_patterns or ALLOW_PATTERNS
    try:
        cached = Path(snapshot_download(model_path, local_files_only=True, allow_patterns=patterns))
        check_model_dir(cached, weights)
        return cached
    except (LocalEntryNotFoundError, LoadError):
        # Not cached, or only partly (e.g. an interrupted download): fetch it.
        pass

    unreachable = (
        f"download failed: model '{model_path}' is not in the local Hugging Face cache "
        "and the hub cannot be reached"
    )
    if _hub_offline():
        raise LoadError(f"{unreachable} (offline: HF_HUB_OFFLINE is set)")
    on_download(model_path)
    log.info("downloading %s from the Hugging Face hub", model_path)
    try:
        path = Path(
            snapshot_download(model_path, allow_patterns=patterns, tqdm_class=progress_tqdm_class())
        )
    except GatedRepoError:
        raise LoadError(
            f"download failed: '{model_path}' is gated; accept its terms on "
            "huggingface.co and set HF_TOKEN for the gateway"
        ) from None
    except RepositoryNotFoundError:
        raise LoadError(
            f"download failed: model '{model_path}' was not found on the Hugging Face hub "
            "(a private repo needs HF_TOKEN)"
        ) from None
    except LocalEntryNotFoundError:
        # huggingface_hub's answer when the network is down and nothing is cached.
        raise LoadError(f"{unreachable} (offline: no network)") from None
    except Exception as exc:  # httpx, disk full, a corrupt file: all are download failures
        raise LoadError(f"download failed: {model_path}: {type(exc).__name__}: {exc}") from None
    check_model_dir(path, weights)
    return path
