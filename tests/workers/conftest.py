"""Worker tests run the real worker on the tiny model, offline."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"

from tests.fixtures.plugin import tiny_lm_path  # noqa: F401
