"""The read-ahead of a model's weights while its worker imports the backend."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import pytest
from huggingface_hub import snapshot_download

from mlx_gateway.workers.runtime.prefetch import (
    READ_AHEAD_ENV,
    local_model_dir,
    start_prefetch,
    weight_files,
)

BLOCK = 1 << 20
"""The tests' read size (the worker's is larger)."""


def _weights(path: Path, floats: int) -> int:
    """A safetensors file (MLX's own writer) at ``path``, whatever its name."""
    path.parent.mkdir(parents=True, exist_ok=True)
    written = path.with_name(path.name + ".tmp.safetensors")
    mx.save_safetensors(str(written), {"w": mx.arange(floats, dtype=mx.float32)})
    written.rename(path)
    return path.stat().st_size


def test_weight_files_in_load_order_sub_folders_too(tmp_path: Path) -> None:
    for name in ("model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors"):
        _weights(tmp_path / name, 4)
    _weights(tmp_path / "transformer" / "diffusion.safetensors", 4)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer.json").write_text("{}")
    assert [p.relative_to(tmp_path).as_posix() for p in weight_files(tmp_path)] == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "transformer/diffusion.safetensors",
    ]


def test_every_byte_of_every_weight_file_is_read(tmp_path: Path) -> None:
    sizes = [_weights(tmp_path / f"model-{i}.safetensors", 3 * BLOCK // 4 + i) for i in (1, 2)]
    prefetch = start_prefetch(str(tmp_path), block=BLOCK)
    assert prefetch is not None
    assert prefetch.wait(30)
    assert prefetch.bytes_read == sum(sizes)
    assert f"{sum(sizes) / 2**20:,.1f} of {sum(sizes) / 2**20:,.1f} MiB" in prefetch.summary()
    prefetch.stop()  # the worker's call once its load is done: harmless after the end


def test_the_read_stops_at_its_limit(tmp_path: Path) -> None:
    total = _weights(tmp_path / "model.safetensors", 2 * BLOCK)  # 8 MiB of floats, 8 blocks
    prefetch = start_prefetch(str(tmp_path), limit=BLOCK + 1, block=BLOCK)
    assert prefetch is not None
    assert prefetch.wait(30)
    assert prefetch.bytes_read == 2 * BLOCK < total  # the block that crossed the limit, no more


def test_nothing_to_read_ahead(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert start_prefetch(str(tmp_path)) is None  # a directory without weights
    assert start_prefetch(str(tmp_path / "missing")) is None
    assert start_prefetch("mlx-community/not-downloaded") is None
    _weights(tmp_path / "model.safetensors", 4)
    monkeypatch.setenv(READ_AHEAD_ENV, "0")  # worker_env turns it off
    assert start_prefetch(str(tmp_path)) is None


def test_a_repo_id_resolves_to_the_snapshot_huggingface_hub_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hub cache's layout, as ``huggingface_hub`` itself reads it offline: the
    read-ahead must land on the folder the backend will load."""
    cache = tmp_path / "hub"
    repo = cache / "models--acme--tiny"
    revision = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    blob = repo / "blobs" / "feedbeef"
    _weights(blob, 4)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "model.safetensors").symlink_to(blob)
    (snapshot / "config.json").write_text("{}")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    found = snapshot_download("acme/tiny", cache_dir=str(cache), local_files_only=True)
    assert local_model_dir("acme/tiny") == Path(found)
    prefetch = start_prefetch("acme/tiny")
    assert prefetch is not None
    assert prefetch.wait(30)
    assert prefetch.bytes_read == blob.stat().st_size


def test_stop_ends_the_read_early(tmp_path: Path) -> None:
    """The worker stops the read once its load is done: a model far bigger than what
    was read by then (a sparse file of 8 GiB) is not read to its end."""
    with (tmp_path / "model.safetensors").open("wb") as f:
        f.truncate(8 << 30)
    prefetch = start_prefetch(str(tmp_path), limit=16 << 30)
    assert prefetch is not None
    prefetch.stop()
    assert prefetch.done
    assert 0 <= prefetch.bytes_read < 8 << 30
