"""The ``peer_process`` fixture: start gateways in their own processes, killed at
the end of the test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .gateways import PeerProcess


@pytest.fixture
def peer_process() -> Iterator[Any]:
    started: list[PeerProcess] = []

    def start(*models: str, api_keys: tuple[str, ...] = ()) -> PeerProcess:
        started.append(PeerProcess(*models, api_keys=api_keys))
        return started[-1]

    yield start
    for peer in started:
        peer.kill()
