"""``mlx-gateway pull --config …``: download every hub model of a config ahead of time.

Each repo id is fetched into the usual Hugging Face cache with
``huggingface_hub.snapshot_download`` (which draws its own progress bars), so a
worker later finds it there and starts without a download. Local model
directories are skipped. One model's failure (offline, unknown repo, gated) is
reported with its reason and the others are still pulled.

huggingface_hub is imported inside :func:`pull_models` only: the gateway itself
never needs it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from mlx_gateway.supervisor.config import GatewayConfig, ModelConfig

ALLOW_PATTERNS = [
    "*.json",
    "*.safetensors",
    "*.npz",
    "*.py",
    "*.model",
    "*.tiktoken",
    "*.txt",
    "*.jsonl",
    "*.jinja",
    "*.yaml",
    "*.pth",
]
"""What any MLX backend reads from a model repo: the union of the files the
workers fetch (config and tokenizer files, safetensors, Whisper's ``weights.npz``,
templates, and for mlx-audio's text-to-speech models their voice packs, ``*.yaml``
configs and ``*.pth`` parts), so a pulled model needs nothing more at its first
start."""


@dataclass
class Pulled:
    """One model's outcome: ``path`` when it is on disk, else ``error``."""

    name: str
    repo: str
    path: Path | None = None
    error: str | None = None
    skipped: bool = False
    seconds: float = 0.0


def is_local(path: str) -> bool:
    """A local directory (the config made local paths absolute) rather than a repo id."""
    return os.path.isabs(path) or Path(path).expanduser().exists()


def repos_of(model: ModelConfig) -> list[tuple[str, str]]:
    """``(label, path)`` of each model folder an entry loads: the model, and its draft
    model for speculative decoding."""
    name = model.served_model_name
    repos = [(name, model.model_path)]
    if model.draft_model_path is not None:
        repos.append((f"{name} (draft)", model.draft_model_path))
    return repos


def pull_models(
    config: GatewayConfig,
    *,
    only: set[str] | None = None,
    out: TextIO | None = None,
    download: Callable[..., str] | None = None,
) -> list[Pulled]:
    """Download the hub models of ``config`` (those named in ``only``, if given).

    ``download`` replaces ``huggingface_hub.snapshot_download`` (same arguments)."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HFValidationError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    fetch = download or snapshot_download
    out = out or sys.stdout
    results: list[Pulled] = []
    seen: set[str] = set()
    wanted = [
        repo
        for model in config.models
        if only is None or only & set(model.names)
        for repo in repos_of(model)
    ]
    for name, repo in wanted:
        result = Pulled(name, repo)
        results.append(result)
        if is_local(repo):
            result.skipped = True
            print(f"{name}: local directory {repo}, nothing to pull", file=out)
            continue
        if repo in seen:
            result.skipped = True
            print(f"{name}: {repo} pulled above", file=out)
            continue
        seen.add(repo)
        print(f"{name}: pulling {repo}", file=out, flush=True)
        started = time.monotonic()
        try:
            result.path = Path(fetch(repo, allow_patterns=ALLOW_PATTERNS))
        except GatedRepoError:
            result.error = "gated repo: accept its terms on huggingface.co and set HF_TOKEN"
        except RepositoryNotFoundError:
            result.error = "not found on the Hugging Face hub (a private repo needs HF_TOKEN)"
        except RevisionNotFoundError as exc:
            result.error = f"revision not found: {exc}"
        except HFValidationError as exc:
            result.error = f"not a Hugging Face repo id: {exc}"
        except LocalEntryNotFoundError:
            if constants.HF_HUB_OFFLINE:
                result.error = "offline (HF_HUB_OFFLINE is set) and not in the local cache"
            else:
                result.error = "the hub cannot be reached and the model is not in the local cache"
        except (OSError, ValueError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # httpx errors and the like: one model, not the whole pull
            result.error = f"{type(exc).__name__}: {exc}"
        result.seconds = time.monotonic() - started
        if result.error:
            print(f"{name}: FAILED: {result.error}", file=out, flush=True)
        else:
            size = _size(result.path)
            print(
                f"{name}: ready in {result.path} ({size / 2**20:.1f} MiB, {result.seconds:.1f} s)",
                file=out,
                flush=True,
            )
    return results


def _size(path: Path | None) -> int:
    if path is None:
        return 0
    total = 0
    for file in path.rglob("*"):
        try:
            if file.is_file():
                total += file.stat().st_size  # follows the cache's symlinks to the blobs
        except OSError:
            pass
    return total


def add_parser(sub: Any) -> None:
    """Register ``pull`` on the ``mlx-gateway`` subcommand parser ``sub``."""
    parser = sub.add_parser("pull", help="download every hub model of a config ahead of time")
    parser.add_argument("--config", required=True, help="YAML file listing the models")
    parser.add_argument("models", nargs="*", help="only these served names or aliases")


def run(args: Any) -> int:
    """``mlx-gateway pull``: 0 when every model is on disk, 1 when one failed, 2 on a
    bad config or an unknown model name."""
    from mlx_gateway.supervisor.config import ConfigError, load_config

    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"mlx-gateway: configuration error: {exc}", file=sys.stderr)
        return 2
    only = set(args.models) if args.models else None
    if only is not None:
        known = {name for model in config.models for name in model.names}
        unknown = sorted(only - known)
        if unknown:
            print(
                f"mlx-gateway: pull: no model named {', '.join(unknown)} in {args.config}",
                file=sys.stderr,
            )
            return 2
    results = pull_models(config, only=only)
    failed = [r for r in results if r.error]
    done = sum(1 for r in results if r.path is not None)
    skipped = sum(1 for r in results if r.skipped)
    print(f"{done} pulled, {skipped} skipped, {len(failed)} failed")
    return 1 if failed else 0
