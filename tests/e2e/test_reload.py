"""Config reload on SIGHUP with the real command and a tiny real model."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest
import yaml

from .gateway import Gateway, wait_until

pytestmark = pytest.mark.slow


def names(gw: Gateway) -> list[str]:
    return [m["id"] for m in httpx.get(f"{gw.base_url}/v1/models", timeout=5).json()["data"]]


def test_sighup_reloads_models_and_rejects_a_broken_file(
    tiny_lm_path: Path, tmp_path: Path
) -> None:
    gw = Gateway(tmp_path, [{"served_model_name": "a", "model_path": str(tiny_lm_path)}])
    try:
        config = yaml.safe_load(gw.config_path.read_text())
        config["models"].append({"served_model_name": "b", "model_path": str(tiny_lm_path)})
        gw.config_path.write_text(yaml.safe_dump(config))
        gw.proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: names(gw) == ["a", "b"], timeout=10)
        r = httpx.post(
            f"{gw.base_url}/v1/chat/completions",
            json={"model": "b", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        gw.config_path.write_text("models:\n  - model_path: ./missing-dir\n    temprature: 1\n")
        gw.proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: "reload rejected" in gw.log(), timeout=10)
        assert "temprature" in gw.log() or "missing-dir" in gw.log()
        assert names(gw) == ["a", "b"]
    finally:
        assert gw.stop() == 0
