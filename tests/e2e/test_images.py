"""The real ``mlx-gateway`` command with the tiny FLUX.2 klein: a client that hangs
up in the middle of a long diffusion stops it on the worker, at the next step."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest

from tests.fixtures.tiny_flux2 import CONFIG_NAME, MODEL_CONFIG

from .gateway import Gateway, wait_until

pytestmark = pytest.mark.slow

STEPS = 400  # a few seconds of denoising on the tiny transformer, then a VAE decode


def test_leaving_a_stream_stops_the_diffusion_loop(tiny_flux2_path: Path, tmp_path: Path) -> None:
    model = {
        "served_model_name": "flux",
        "model_path": str(tiny_flux2_path),
        "model_type": "image-generation",
        "config_name": CONFIG_NAME,
        "model_config": MODEL_CONFIG,
        "size": "16x16",
    }
    gw = Gateway(tmp_path, [model])
    try:
        body = {"model": "flux", "prompt": "a red cat", "stream": True, "steps": STEPS}
        with (
            httpx.Client(base_url=gw.base_url, timeout=120) as http,
            http.stream("POST", "/v1/images/generations", json=body) as r,
        ):
            assert r.status_code == 200
            for line in r.iter_lines():
                if line.startswith(": image 1/1 step 3/"):
                    break  # hang up while the loop runs
        left = time.monotonic()

        stopped = re.compile(rf"stopped at step (\d+)/{STEPS}")
        assert wait_until(lambda: stopped.search(gw.log()), timeout=30), gw.log()[-3000:]
        step = int(stopped.search(gw.log()).group(1))  # type: ignore[union-attr]
        assert 3 <= step < STEPS
        assert "picture 1/1 done" not in gw.log()  # no VAE decode after the cancel
        assert time.monotonic() - left < 30
        assert gw.model("flux")["progress"] == []
        assert gw.model("flux")["inflight"] == 0
    finally:
        gw.stop()
