"""``memory_budget: auto``: MLX's recommended working set on Apple silicon (asked of
a real child interpreter, the gateway never imports MLX), 0.75 of RAM elsewhere."""

from __future__ import annotations

import logging
import sys

import psutil
import pytest

from mlx_gateway.supervisor.config import ServerConfig
from mlx_gateway.supervisor.config.sizes import budget_bytes
from mlx_gateway.supervisor.pool.budget import (
    on_apple_silicon,
    recommended_working_set,
    resolve_budget,
)

GB = 1000**3


def test_auto_is_the_recommended_working_set_when_known() -> None:
    assert budget_bytes("auto", total=16 * GB, recommended=11 * GB) == 11 * GB
    assert budget_bytes("AUTO", total=16 * GB) == 12 * GB  # none known: 0.75 of RAM
    assert budget_bytes(0.5, total=16 * GB, recommended=11 * GB) == 8 * GB  # not auto
    assert ServerConfig().memory_budget == "auto"


def test_the_probe_asks_the_installed_mlx() -> None:
    recommended = recommended_working_set(sys.executable)
    if on_apple_silicon():
        assert recommended is not None and recommended > GB
    else:
        assert recommended is None  # MLX on Linux recommends no working set
        assert resolve_budget(ServerConfig()) == int(0.75 * psutil.virtual_memory().total)


def test_a_probe_that_cannot_run_falls_back(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mlx_gateway.placement"):
        assert recommended_working_set("/nonexistent/python") is None
    assert "could not ask MLX for its recommended working set" in caplog.text
