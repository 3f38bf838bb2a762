"""Pulling a model by its Ollama name from Ollama's registry into a store (see
:mod:`.ollama_store`): the manifest, then each blob it names.

Progress goes to ``report`` in the lines Ollama's own ``/api/pull`` streams
(``pulling manifest``; per blob ``{"status": "pulling <12 hex>", "digest", "total",
"completed"}``; ``verifying sha256 digest``; ``writing manifest``). A blob is
fetched into ``sha256-<hex>-partial`` and a later pull resumes it with a ``Range``
request; it becomes ``sha256-<hex>`` only once its SHA-256 matches the manifest.
The manifest is written last, so a model is in the store whole or not at all: a
pull that fails removes the blobs it finished and leaves no manifest (the partial
file of the blob it was fetching stays, to resume, unless its digest was wrong).

``MLX_GATEWAY_OLLAMA_REGISTRY`` replaces ``https://registry.ollama.ai`` (a mirror,
or the tests' stand-in). Blocking (httpx): the gateway runs it on a thread.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from mlx_gateway.store.ollama_store import (
    DEFAULT_HOST,
    OllamaName,
    blob_file,
    manifest_file,
    model_layer,
)

MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json, "
    "application/vnd.oci.image.manifest.v1+json"
)
CHUNK = 1 << 20
Report = Callable[[dict[str, Any]], None]


class PullError(Exception):
    """Why a pull failed, in words a person can act on; ``status`` for HTTP."""

    def __init__(self, message: str, status: int = 502, resumable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.resumable = resumable
        """The partial blob stays: a later pull continues it."""


def registry_url(name: OllamaName) -> str:
    if name.host == DEFAULT_HOST:
        configured = os.environ.get("MLX_GATEWAY_OLLAMA_REGISTRY")
        if configured:
            return configured.rstrip("/")
    return f"https://{name.host}"


def _get(client: httpx.Client, url: str, name: OllamaName, **kwargs: Any) -> httpx.Response:
    try:
        response = client.get(url, **kwargs)
    except httpx.HTTPError as exc:
        raise PullError(
            f"pull {name.display}: the registry {registry_url(name)} cannot be reached: "
            f"{type(exc).__name__}: {exc}",
            status=502,
        ) from None
    if response.status_code == 404:
        raise PullError(
            f"pull {name.display}: no such model in {registry_url(name)} (check the name "
            "and tag, as listed on ollama.com/library)",
            status=404,
        )
    if response.status_code >= 400:
        raise PullError(
            f"pull {name.display}: the registry answered {response.status_code} for {url}",
            status=502,
        )
    return response


def fetch_manifest(client: httpx.Client, name: OllamaName) -> dict[str, Any]:
    url = f"{registry_url(name)}/v2/{name.namespace}/{name.model}/manifests/{name.tag}"
    response = _get(client, url, name, headers={"Accept": MANIFEST_TYPES})
    try:
        manifest = response.json()
    except ValueError:
        manifest = None
    if model_layer(manifest) is None:
        raise PullError(
            f"pull {name.display}: the registry's manifest names no model (GGUF) layer",
            status=400,
        )
    assert isinstance(manifest, dict)
    return manifest


def _hash_file(path: Path) -> Any:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest


def _fetch_blob(
    client: httpx.Client,
    name: OllamaName,
    store: Path,
    layer: dict[str, Any],
    report: Report,
    stop: threading.Event,
) -> bool:
    """Fetch one blob (resuming its partial file); True when this call wrote it."""
    digest, size = str(layer["digest"]), int(layer.get("size") or 0)
    final = blob_file(store, digest)
    line = {
        "status": f"pulling {digest.removeprefix('sha256:')[:12]}",
        "digest": digest,
        "total": size,
    }
    if final.is_file() and final.stat().st_size == size:
        report({**line, "completed": size})
        return False
    partial = final.with_name(final.name + "-partial")
    partial.parent.mkdir(parents=True, exist_ok=True)
    done = partial.stat().st_size if partial.exists() else 0
    hasher = _hash_file(partial) if done else hashlib.sha256()
    report({**line, "completed": done})
    if done < size:
        url = f"{registry_url(name)}/v2/{name.namespace}/{name.model}/blobs/{digest}"
        headers = {"Range": f"bytes={done}-"} if done else {}
        try:
            with client.stream("GET", url, headers=headers, follow_redirects=True) as response:
                if response.status_code >= 400:
                    raise PullError(
                        f"pull {name.display}: the registry answered "
                        f"{response.status_code} for blob {digest}"
                    )
                if done and response.status_code != 206:  # no range support: start over
                    done, hasher = 0, hashlib.sha256()
                with partial.open("r+b" if done else "wb") as out:
                    out.seek(done)
                    out.truncate()
                    for chunk in response.iter_bytes():  # as it arrives: a drop keeps it
                        if stop.is_set():
                            raise PullError(
                                f"pull {name.display}: the client left", 499, resumable=True
                            )
                        out.write(chunk)
                        hasher.update(chunk)
                        done += len(chunk)
                        report({**line, "completed": min(done, size)})
        except httpx.HTTPError as exc:
            raise PullError(
                f"pull {name.display}: the download of {digest} broke off after {done} of "
                f"{size} bytes ({type(exc).__name__}); pull again to resume it",
                resumable=True,
            ) from None
    if f"sha256:{hasher.hexdigest()}" != digest or done != size:
        partial.unlink(missing_ok=True)
        raise PullError(
            f"pull {name.display}: blob {digest} arrived with another digest "
            f"(sha256:{hasher.hexdigest()}, {done} bytes): the registry or the network "
            "corrupted it; it was removed, pull again",
            status=502,
        )
    os.replace(partial, final)
    return True


def pull(
    name: OllamaName,
    store: Path,
    report: Report = lambda line: None,
    stop: threading.Event | None = None,
    transport: httpx.BaseTransport | None = None,
) -> Path:
    """Pull ``name`` into ``store``; return its GGUF blob. Raises :class:`PullError`."""
    stop = stop or threading.Event()
    report({"status": "pulling manifest"})
    written: list[Path] = []
    with httpx.Client(timeout=httpx.Timeout(30.0, read=300.0), transport=transport) as client:
        manifest = fetch_manifest(client, name)
        layers = [
            layer
            for layer in [manifest.get("config"), *manifest.get("layers", [])]
            if isinstance(layer, dict) and layer.get("digest")
        ]
        try:
            for layer in layers:
                if _fetch_blob(client, name, store, layer, report, stop):
                    written.append(blob_file(store, str(layer["digest"])))
        except PullError as exc:
            if not exc.resumable:
                for path in written:
                    path.unlink(missing_ok=True)
            raise
    report({"status": "verifying sha256 digest"})
    report({"status": "writing manifest"})
    target = manifest_file(store, name)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".manifest-")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(manifest, out)
    os.replace(tmp, target)
    model = model_layer(manifest)
    assert model is not None
    return blob_file(store, str(model["digest"]))
