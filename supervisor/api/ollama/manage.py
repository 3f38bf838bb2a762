"""``POST /api/pull``, ``DELETE /api/delete``, ``POST /api/copy``: models without
editing YAML (admin endpoints when ``server.admin_keys`` is set).

* pull: a Hugging Face repo id is downloaded into the Hugging Face cache (progress
  as NDJSON, see :mod:`.download`), its kind read from its files, and from then on
  it is served under its repo id, across restarts (``pulled.json``, see
  :mod:`...config.pulled`); the config file is not touched. A name already served
  pulls its ``model_path`` again (an update); a local folder has nothing to pull.
  A pull that fails (offline, unknown repo, not a model) adds nothing.
* delete: a pulled model stops being served (its worker stops once idle) and its
  files leave the cache, unless a configured entry uses the same repo. A name
  given by ``/api/copy`` is removed alone. Models of the config file are refused.
* copy: a new name (an alias) for a served model, kept across restarts. The
  model's entry changes, so its worker restarts at its next request.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from mlx_gateway.store.gguf_files import conversions_dir
from mlx_gateway.store.ollama_store import (
    PREFIX,
    OllamaName,
    looks_like_ollama,
    own_store,
    remove_model,
)
from mlx_gateway.supervisor.api.ollama.download import PullFailed, Snapshot, download
from mlx_gateway.supervisor.api.ollama.names import bare, listed, resolve
from mlx_gateway.supervisor.api.ollama.registry import pull_ollama
from mlx_gateway.supervisor.api.ollama.replies import error_line, line, ndjson, ollama_errors
from mlx_gateway.supervisor.api.ollama.schemas import CopyRequest, ModelRequest
from mlx_gateway.supervisor.config import GatewayConfig
from mlx_gateway.supervisor.config.pulled import PulledModels, kind_of_snapshot, with_pulled
from mlx_gateway.supervisor.errors import BadRequest, GatewayError, ModelNotFound
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.http import JSONResponse, read_json
from mlx_gateway.supervisor.pool.memory import hub_cache_dir
from mlx_gateway.supervisor.pull import is_local

log = logging.getLogger("mlx_gateway.pull")

REPO_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


def _lock(request: Request) -> asyncio.Lock:
    """One change of the served models at a time."""
    return gateway_of(request).models_lock


async def _apply(request: Request, pulled: PulledModels, models: list[Any] | None = None) -> None:
    """Write ``pulled`` and serve what it says (the registry adds, replaces or
    retires entries as a config reload does)."""
    registry = gateway_of(request).registry
    pulled.write()
    base = (
        registry.config
        if models is None
        else GatewayConfig(server=registry.config.server, models=models)
    )
    await registry.reload(with_pulled(base, pulled))


def _repo_of(request: Request, name: str) -> tuple[str, bool]:
    """The repo (or ``ollama:`` name) a pull fetches, and whether the name is served
    already."""
    try:
        handle = resolve(gateway_of(request).registry, name)
    except ModelNotFound:
        pass
    else:
        return handle.config.model_path, True
    if looks_like_ollama(name):
        try:
            return OllamaName.parse(name).model_path, False
        except ValueError as exc:
            raise BadRequest(str(exc), param="model") from None
    repo = bare(name)
    if not REPO_ID.match(repo):
        raise BadRequest(
            f"'{name}' is neither an Ollama name (llama3.2, qwen3:4b) nor a Hugging Face "
            "repo id (mlx-community/Qwen3-0.6B-4bit).",
            param="model",
        )
    return repo, False


async def _pull_ollama(
    request: Request, model_path: str, served: bool
) -> AsyncIterator[dict[str, Any]]:
    async for item in pull_ollama(OllamaName.parse(model_path)):
        yield item
    if not served:
        async with _lock(request):
            pulled = PulledModels.read()
            pulled.models[model_path] = "lm"
            await _apply(request, pulled)
        log.info("pulled %s: served from now on (converted at its first load)", model_path)
    yield {"status": "success"}


async def _pull(request: Request, repo: str, served: bool) -> AsyncIterator[dict[str, Any]]:
    snapshot: Snapshot | None = None
    async for item in download(repo):
        if isinstance(item, Snapshot):
            snapshot = item
        else:
            yield item
    assert snapshot is not None
    if not served:
        kind = kind_of_snapshot(repo, snapshot.path)
        if kind is None:
            raise PullFailed(
                f"pull {repo}: downloaded, but its files are not a model this gateway can "
                "serve by itself (an MLX language, vision or embedding model); add it to the "
                "config file with its model_type instead",
                status=400,
            )
        yield {"status": "writing manifest"}
        async with _lock(request):
            pulled = PulledModels.read()
            pulled.models[repo] = kind
            await _apply(request, pulled)
        log.info("pulled %s (%s, %.1f MiB): served from now on", repo, kind, snapshot.size / 2**20)
    yield {"status": "success"}


@ollama_errors
async def pull(request: Request) -> Response:
    """``POST /api/pull``."""
    req = await read_json(request, ModelRequest)
    repo, served = _repo_of(request, req.target)
    if repo.startswith(PREFIX):
        lines: AsyncIterator[dict[str, Any]] = _pull_ollama(request, repo, served)
    elif is_local(repo):
        lines = _nothing_to_pull()
    else:
        lines = _pull(request, repo, served)
    if not req.stream:
        last: dict[str, Any] = {}
        async for item in lines:
            last = item
        return JSONResponse(last)

    async def body() -> AsyncIterator[bytes]:
        try:
            async for item in lines:
                yield line(item)
        except GatewayError as exc:
            log.warning("%s", exc.message)
            yield error_line(exc)

    return ndjson(body())


async def _nothing_to_pull() -> AsyncIterator[dict[str, Any]]:
    yield {"status": "success"}


def _configured(request: Request, pulled: PulledModels) -> list[Any]:
    """The entries of the config file (not added by a pull or a copy)."""
    out = []
    for model in gateway_of(request).registry.config.models:
        if model.source == "pulled":
            continue
        own = [a for a in model.aliases if a not in pulled.copies]
        out.append(msgspec.structs.replace(model, aliases=own) if own != model.aliases else model)
    return out


@ollama_errors
async def delete(request: Request) -> Response:
    """``DELETE /api/delete``."""
    req = await read_json(request, ModelRequest)
    name = req.target
    async with _lock(request):
        pulled = PulledModels.read()
        found = gateway_of(request).registry.lookup(name)  # the copy's own name, any case
        named = (name, bare(name), *((found.name,) if found is not None else ()))
        copy = next((n for n in named if n in pulled.copies), None)
        kept = _configured(request, pulled)  # before pulled changes: it names what is ours
        if copy is not None:
            del pulled.copies[copy]
            await _apply(request, pulled, kept)
            return JSONResponse({})
        handle = resolve(gateway_of(request).registry, name)
        repo = handle.config.model_path
        if repo not in pulled.models:
            raise BadRequest(
                f"'{handle.name}' comes from the config file; remove it there (only models "
                "added with /api/pull or names added with /api/copy can be deleted).",
                param="model",
            )
        del pulled.models[repo]
        for alias, target in list(pulled.copies.items()):
            if target == handle.name:
                del pulled.copies[alias]
        await _apply(request, pulled, kept)
    used = {m.model_path for m in kept} | {m.draft_model_path for m in kept}
    if repo not in used:
        await asyncio.to_thread(_delete_files, repo)
    log.info("deleted %s", repo)
    return JSONResponse({})


def _delete_files(repo: str) -> None:
    """Remove every cached revision of ``repo`` from the Hugging Face cache; for an
    Ollama name, its manifest in the gateway's store, the blobs no other manifest
    there uses, and the MLX folder the GGUF was converted into."""
    from huggingface_hub import scan_cache_dir

    if repo.startswith(PREFIX):
        for digest in remove_model(own_store(), OllamaName.parse(repo)):
            shutil.rmtree(conversions_dir() / digest.removeprefix("sha256:"), ignore_errors=True)
        return

    cache = scan_cache_dir(hub_cache_dir())
    for info in cache.repos:
        if info.repo_id == repo and info.repo_type == "model":
            cache.delete_revisions(*(r.commit_hash for r in info.revisions)).execute()


@ollama_errors
async def copy(request: Request) -> Response:
    """``POST /api/copy``: ``destination`` becomes another name of ``source``."""
    req = await read_json(request, CopyRequest)
    registry = gateway_of(request).registry
    handle = resolve(registry, req.source)
    new = bare(req.destination)
    if not new:
        raise BadRequest("'destination' must be a name.", param="destination")
    try:
        taken = resolve(registry, req.destination)
    except ModelNotFound:
        taken = None
    if taken is not None:
        raise BadRequest(
            f"'{req.destination}' already names the model '{listed(taken.name)}'; pick "
            "another name or delete that one first.",
            param="destination",
        )
    async with _lock(request):
        pulled = PulledModels.read()
        pulled.copies[new] = handle.name
        await _apply(request, pulled)
    return JSONResponse({})
