"""A real language-model worker whose forward pass blocks while the process lives
(its main thread goes on heartbeating): the issue's own scenario, ``hang_timeout:
10``. The request in it must end with a clear error well within the limit, the
worker is killed, and later requests are answered by a fresh worker.

The block is real: a ``sitecustomize`` on the worker's ``PYTHONPATH`` (the model's
``worker_env``) wraps mlx-lm's llama ``Model.__call__`` so that, while a trap file
exists, the call sleeps forever (the GIL released, as in a stuck Metal wait).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import openai
import pytest

from .gateway import Gateway

pytestmark = pytest.mark.slow

SITECUSTOMIZE = '''
import importlib.util
import os
import sys
import time

TRAP = os.environ["BLOCK_FORWARD_FILE"]


class _BlockingLlama:
    """Wraps mlx_lm.models.llama.Model.__call__ once that module is imported."""

    def find_spec(self, name, path, target=None):
        if name != "mlx_lm.models.llama":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            forward = module.Model.__call__

            def blocking(self, *args, **kwargs):
                if os.path.exists(TRAP):
                    print("forward pass blocked (test trap)", file=sys.stderr, flush=True)
                    while True:
                        time.sleep(1)
                return forward(self, *args, **kwargs)

            module.Model.__call__ = blocking

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _BlockingLlama())
'''

LIMIT = 10.0


def chat(gw: Gateway, text: str, **extra: object) -> httpx.Response:
    body = {"model": "tiny", "messages": [{"role": "user", "content": text}], "max_tokens": 4}
    return httpx.post(f"{gw.base_url}/v1/chat/completions", json={**body, **extra}, timeout=120)


def trapped(tiny_lm_path: Path, tmp_path: Path) -> tuple[Gateway, Path]:
    """A gateway serving ``tiny`` whose forward pass blocks while the returned trap
    file exists."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    trap = tmp_path / "block-forward"
    model = {
        "model_path": str(tiny_lm_path),
        "served_model_name": "tiny",
        "worker_env": {"PYTHONPATH": str(hooks), "BLOCK_FORWARD_FILE": str(trap)},
    }
    return Gateway(tmp_path, [model], hang_timeout=LIMIT), trap


def test_a_blocked_forward_pass_ends_in_an_error_and_the_model_restarts(
    tiny_lm_path: Path, tmp_path: Path
) -> None:
    gw, trap = trapped(tiny_lm_path, tmp_path)
    try:
        assert chat(gw, "warm up").status_code == 200, gw.log()
        pid = gw.model("tiny")["pid"]
        trap.touch()
        started = time.monotonic()
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": "this one gets stuck"}],
            "max_tokens": 4,
            "stream": True,
        }
        events = []
        with httpx.stream(
            "POST", f"{gw.base_url}/v1/chat/completions", json=body, timeout=120
        ) as response:
            assert response.status_code == 200
            for line in response.iter_lines():  # keep-alive comments come every 2 s
                if line.startswith("data: "):
                    events.append(line[len("data: ") :])
                assert time.monotonic() - started < 6 * LIMIT, "no error: the stream hangs"
        ended = time.monotonic() - started
        trap.unlink()
        assert events[-1] == "[DONE]", events
        error = json.loads(events[-2])["error"]
        message = error["message"]
        assert "model 'tiny'" in message and "stuck" in message, message
        assert "prefill of" in message and "step_timeout" in message, message
        assert "forward pass blocked" in message, message  # the worker's last log lines
        # auto: hang_timeout, or 10 times the longest step measured if more (the
        # warm-up's steps on this machine take well under a second); then a heartbeat
        # and a housekeeping round, with generous slack for a loaded machine.
        assert ended < 3 * LIMIT, (ended, gw.log())
        assert "killing worker pid" in gw.log() and "stuck" in gw.log()
        metrics = httpx.get(f"{gw.base_url}/metrics", timeout=10).text
        assert 'mlx_gateway_model_stalls_total{model="tiny",step="prefill"} 1' in metrics
        # Later requests are answered by a fresh worker.
        for i in range(2):
            later = chat(gw, f"later {i}")
            assert later.status_code == 200, later.text
        assert gw.model("tiny")["pid"] != pid
    finally:
        trap.unlink(missing_ok=True)
        gw.stop()


def test_a_whole_answer_on_a_forward_pass_that_always_blocks_ends_with_the_error(
    tiny_lm_path: Path, tmp_path: Path
) -> None:
    """Not streamed, through the official SDK with its default retries: the 200 and
    keep-alive spaces go out, the answer is computed once more on the next worker,
    which blocks too; then the body ends with the error the stream gets, within
    three step limits, and the SDK hands it on (no "Connection error", no retry)."""
    gw, trap = trapped(tiny_lm_path, tmp_path)
    try:
        assert chat(gw, "warm up").status_code == 200, gw.log()
        trap.touch()
        started = time.monotonic()
        with openai.OpenAI(base_url=f"{gw.base_url}/v1", api_key="unused") as sdk:
            reply = sdk.chat.completions.create(
                model="tiny",
                messages=[{"role": "user", "content": "this one gets stuck twice"}],
                max_tokens=4,
            )
        ended = time.monotonic() - started
        trap.unlink()
        assert not reply.choices, reply
        error = (reply.model_extra or {})["error"]
        message = error["message"]
        assert error["code"] == "worker_crashed", error
        assert "model 'tiny'" in message and "stuck" in message, message
        assert "prefill of" in message and "step_timeout" in message, message
        assert "forward pass blocked" in message, message  # the worker's last log lines
        assert ended < 3 * LIMIT, (ended, gw.log())
        assert gw.log().count("computing it again on the model's next worker") == 1
        metrics = httpx.get(f"{gw.base_url}/metrics", timeout=10).text
        assert 'route="/v1/chat/completions",status="200"} 2' in metrics  # + the warm-up
        print(f"whole answer's error after {ended:.1f} s")
    finally:
        trap.unlink(missing_ok=True)
        gw.stop()
