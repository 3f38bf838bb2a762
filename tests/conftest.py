"""Shared test setup: no model hub, and the tiny-model fixtures for every package."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Nothing may be downloaded during the tests; set before any hub library is imported.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The worker processes the tests start share one bytecode cache, kept between runs,
# so that each does not compile MLX, mlx-lm and transformers again where bytecode is
# not written (PYTHONDONTWRITEBYTECODE); the gateway's own choice of a cache is
# tested in tests/supervisor/pool/test_bytecode.py.
os.environ.setdefault(
    "PYTHONPYCACHEPREFIX",
    str(Path(__file__).resolve().parent.parent / ".pytest_cache" / "bytecode"),
)

pytest_plugins = ["tests.fixtures.plugin", "tests.fixtures.whisper", "tests.fixtures.leaks"]


@pytest.fixture(autouse=True)
def _own_needs_file(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each test remembers measured memory needs in its own folder, never the user's
    cache (a need measured by one test's fake worker must not leak into another)."""
    monkeypatch.setenv("MLX_GATEWAY_CACHE_DIR", str(tmp_path_factory.mktemp("needs")))
