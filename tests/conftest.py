"""Shared test setup: no model hub, and the tiny-model fixtures for every package."""

from __future__ import annotations

import os

# Nothing may be downloaded during the tests; set before any hub library is imported.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

pytest_plugins = ["tests.fixtures.plugin", "tests.fixtures.whisper"]
