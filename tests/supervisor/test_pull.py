"""``mlx-gateway pull``: the real command with the real huggingface_hub, on a
Hugging Face cache the test lays out (offline, as every test: nothing is
downloaded, a cached model is found, a missing one fails with its reason)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlx_gateway.supervisor.cli import main

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cache_repo(hub: Path, repo: str, files: dict[str, bytes]) -> Path:
    """A repo as huggingface_hub stores it: blobs, a snapshot of symlinks, refs/main."""
    root = hub / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (root / "blobs").mkdir()
    for name, data in files.items():
        blob = root / "blobs" / f"blob-{name}"
        blob.write_bytes(data)
        (snapshot / name).symlink_to(os.path.relpath(blob, snapshot))
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(COMMIT)
    return snapshot


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache that snapshot_download uses."""
    from huggingface_hub import constants

    assert constants.HF_HUB_OFFLINE  # tests/conftest.py sets HF_HUB_OFFLINE=1
    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def run_pull(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["pull", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_pull_offline(tmp_path: Path, hub: Path, capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = cache_repo(
        hub, "org/cached", {"config.json": b"{}", "model.safetensors": b"\0" * 3 * 2**20}
    )
    local = tmp_path / "models" / "mine"
    local.mkdir(parents=True)
    config = tmp_path / "gw.yaml"
    config.write_text(
        "models:\n"
        "  - model_path: org/cached\n    served_model_name: cached\n"
        "  - model_path: org/missing\n    served_model_name: missing\n"
        "  - model_path: ./models/mine\n    served_model_name: mine\n"
    )
    code, out, err = run_pull(capsys, "--config", str(config))
    assert code == 1, (out, err)
    assert f"cached: ready in {snapshot}" in out
    assert "(3.0 MiB" in out
    assert "missing: FAILED: offline (HF_HUB_OFFLINE is set) and not in the local cache" in out
    assert f"mine: local directory {local}, nothing to pull" in out
    assert out.splitlines()[-1] == "1 pulled, 1 skipped, 1 failed"

    code, out, err = run_pull(capsys, "--config", str(config), "cached")
    assert code == 0, out + err
    assert "missing" not in out
    assert out.splitlines()[-1] == "1 pulled, 0 skipped, 0 failed"

    code, out, err = run_pull(capsys, "--config", str(config), "nope")
    assert code == 2
    assert "no model named nope" in err


def test_pull_takes_the_draft_models_too(
    tmp_path: Path, hub: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    big = cache_repo(hub, "org/big", {"config.json": b"{}", "model.safetensors": b"\0" * 2**20})
    small = cache_repo(hub, "org/small", {"config.json": b"{}", "model.safetensors": b"\0"})
    config = tmp_path / "gw.yaml"
    config.write_text(
        "models:\n"
        "  - model_path: org/big\n    served_model_name: big\n"
        "    draft_model_path: org/small\n"
        "  - model_path: org/small\n    served_model_name: small\n"
    )
    code, out, err = run_pull(capsys, "--config", str(config))
    assert code == 0, out + err
    assert f"big: ready in {big}" in out
    assert f"big (draft): ready in {small}" in out
    assert "small: org/small pulled above" in out
    assert out.splitlines()[-1] == "2 pulled, 1 skipped, 0 failed"


def test_pull_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "gw.yaml"
    config.write_text("models: []\n")
    code, _, err = run_pull(capsys, "--config", str(config))
    assert code == 2
    assert "configuration error" in err
