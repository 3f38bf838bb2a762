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

from mlx_gateway.store.ollama_store import PREFIX as OLLAMA_PREFIX
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
        if repo.startswith(OLLAMA_PREFIX):
            _pull_ollama(result, out)
            continue
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


def _pull_ollama(result: Pulled, out: TextIO) -> None:
    """Pull an ``ollama:`` name into the gateway's store (converted at its first load)."""
    from mlx_gateway.store.ollama_pull import PullError, pull
    from mlx_gateway.store.ollama_store import OllamaName, own_store

    started = time.monotonic()
    shown: set[str] = set()

    def report(line: dict[str, Any]) -> None:
        status = str(line.get("status", ""))
        total = int(line.get("total") or 0)
        if total and line.get("completed") == total and status not in shown:
            shown.add(status)
            print(f"{result.name}: {status} ({total / 2**20:.1f} MiB)", file=out, flush=True)

    try:
        name = OllamaName.parse(result.repo)
        result.path = pull(name, own_store(), report)
    except ValueError as exc:
        result.error = str(exc)
    except PullError as exc:
        result.error = exc.message
    result.seconds = time.monotonic() - started
    if result.error:
        print(f"{result.name}: FAILED: {result.error}", file=out, flush=True)
    else:
        print(f"{result.name}: ready in {result.path} ({result.seconds:.1f} s)", file=out)


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
    parser = sub.add_parser(
        "pull",
        help="download models ahead of time: those of a config, or Ollama names / hub ids",
    )
    parser.add_argument("--config", help="YAML file listing the models")
    parser.add_argument(
        "models",
        nargs="*",
        help="with --config: only these served names or aliases; without: Ollama names "
        "(llama3.2, qwen3:4b) or Hugging Face repo ids to pull and serve from then on",
    )


def run(args: Any) -> int:
    """``mlx-gateway pull``: 0 when every model is on disk, 1 when one failed, 2 on a
    bad config or an unknown model name."""
    from mlx_gateway.supervisor.config import ConfigError, load_config

    if args.config is None:
        return _pull_names(args.models)
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


def _pull_names(names: list[str]) -> int:
    """``mlx-gateway pull llama3.2 org/repo``: pull each, and serve it from then on
    (``pulled.json``, as ``/api/pull`` does)."""
    from mlx_gateway.store.ollama_store import OllamaName, looks_like_ollama
    from mlx_gateway.supervisor.config.pulled import PulledModels, kind_of_snapshot

    if not names:
        print("mlx-gateway: pull: give --config, or the models to pull", file=sys.stderr)
        return 2
    models = []
    for text in names:
        try:
            path = OllamaName.parse(text).model_path if looks_like_ollama(text) else text
        except ValueError as exc:
            print(f"mlx-gateway: pull: {exc}", file=sys.stderr)
            return 2
        models.append(ModelConfig(model_path=path, served_model_name=text))
    results = pull_models(GatewayConfig(models=models))
    pulled = PulledModels.read()
    for result in results:
        if result.path is None:
            continue
        if result.repo.startswith(OLLAMA_PREFIX):
            pulled.models[result.repo] = "lm"
        elif kind := kind_of_snapshot(result.repo, result.path):
            pulled.models[result.repo] = kind
    pulled.write()
    failed = sum(1 for r in results if r.error)
    print(f"{len(results) - failed} pulled, {failed} failed; served from the next start")
    return 1 if failed else 0
