"""A spare worker process (``WorkerSpec.spare``) over real ZeroMQ: it reports Ready
with no model, refuses requests until an ``Assign`` names its model, then loads it
and serves as an ordinary worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlx_gateway.protocol.messages import Assign, Done, Error, Progress, Ready, Shutdown
from mlx_gateway.protocol.spec import WorkerSpec
from tests.workers.harness import WorkerHarness, text_of

pytestmark = pytest.mark.slow


def test_a_spare_loads_the_model_it_is_assigned(tmp_path: Path, tiny_lm_path: Path) -> None:
    spare = WorkerHarness(tmp_path, "", spare=True)
    try:
        ready = spare.wait_other(Ready)
        assert ready.facts.model_type == "spare" and ready.memory.rss > 0
        spare.generate("early", max_tokens=2)
        (error,) = spare.finished("early")
        assert isinstance(error, Error) and error.status == 503 and "no model" in error.message

        spare.others.clear()
        spec = WorkerSpec(
            worker_id="ignored", kind="lm", model_path=str(tiny_lm_path), served_model_name="t"
        )
        spare.send(Assign(spec=spec))
        loaded = spare.wait_other(Ready)
        assert loaded.facts.model_type == "llama" and loaded.facts.context_length
        assert any(isinstance(r, Progress) for r in spare.others)
        spare.generate("r1", max_tokens=3, temperature=0.0)
        events = spare.finished("r1")
        assert isinstance(events[-1], Done) and text_of(events)
        spare.send(Shutdown(grace=1.0))
        assert spare.wait_exit(30) == 0
    finally:
        spare.close()


def test_a_spare_told_to_stop_exits_cleanly(tmp_path: Path) -> None:
    spare = WorkerHarness(tmp_path, "", spare=True)
    try:
        spare.wait_other(Ready)
        spare.send(Shutdown(grace=0.0))
        assert spare.wait_exit(30) == 0
        assert "spare stopped before it was given a model" in spare.stderr()
    finally:
        spare.close()
