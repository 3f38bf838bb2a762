"""Worker tests run the real worker on the tiny model, offline."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"

# Also registered as a plugin by tests/conftest.py; re-exported so this package
# runs on its own too. Both build into the same folder, so the model is built once.
from tests.fixtures.plugin import tiny_lm_path  # noqa: F401
