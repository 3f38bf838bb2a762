"""The official ``ollama`` npm client (installed from the npm registry by the test
setup, at the release last checked; ``MLX_GATEWAY_TEST_OLLAMA_JS`` picks another
or ``latest``), unmodified, against the gateway: a whole process with real workers
(list, show, chat streamed and not, generate, embed, ps, pull from the local
stand-in for the hub, copy, delete, keep_alive 0), and the app with a scripted
fake model for a tool-call round trip."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.gateway import Gateway
from tests.fixtures.npm import npm, npm_install
from tests.supervisor.api.lm_app import OK, hermes_call
from tests.supervisor.live import LiveGateway

from .conftest import PULLABLE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

OLLAMA_JS_DIR = Path.home() / ".cache" / "mlx-gateway-tests" / "ollama-js"
OLLAMA_JS_VERSION = os.environ.get("MLX_GATEWAY_TEST_OLLAMA_JS", "0.6.4")
SCRIPT = Path(__file__).with_name("js") / "sequence.mjs"


@pytest.fixture(scope="module")
def ollama_js(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the sequence script beside the installed ``ollama`` package."""
    install = npm_install(
        OLLAMA_JS_DIR, f"ollama@{OLLAMA_JS_VERSION}", timeout=600, what="the ollama client"
    )
    if install.returncode != 0:
        if npm("ping", timeout=60, what="the ollama client").returncode != 0:
            pytest.skip(f"the npm registry is unreachable:\n{install.stderr[-2000:]}")
        raise AssertionError(f"npm install ollama failed:\n{install.stderr}")
    assert (OLLAMA_JS_DIR / "node_modules" / "ollama" / "package.json").exists()
    folder = tmp_path_factory.mktemp("ollama-js")
    (folder / "node_modules").symlink_to(OLLAMA_JS_DIR / "node_modules")
    shutil.copy(SCRIPT, folder / SCRIPT.name)
    return folder / SCRIPT.name


def run(script: Path, url: str, names: dict[str, Any]) -> dict[str, Any]:
    node = shutil.which("node")
    assert node is not None
    done = subprocess.run(
        [node, str(script), url, json.dumps(names)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_npm_client_on_real_workers(ollama_js: Path, gateway: Gateway) -> None:
    out = run(ollama_js, gateway.base_url, {"chat": "tiny", "embed": "minilm", "pull": PULLABLE})
    assert {"tiny:latest", "minilm:latest"} <= set(out["list"])
    assert "completion" in out["show"]["capabilities"]
    assert out["show"]["model_info"]["llama.context_length"] == 2048
    chat = out["chat"]
    assert chat["done"] and chat["role"] == "assistant" and 0 < chat["eval_count"] <= 5
    last = out["chatStream"]["last"]
    assert last["done"] and last["eval_count"] and out["chatStream"]["parts"] >= 2
    assert out["generate"]["done"] and out["generate"]["eval_count"] <= 4
    assert out["embed"][0] == out["embed"][1] > 0
    assert any(m["name"] == "tiny:latest" and m["size_vram"] > 0 for m in out["ps"])
    assert out["pull"][0] == "pulling manifest" and out["pull"][-1] == "success"
    assert f"{PULLABLE}:latest" in out["listAfterPull"]
    assert out["copy"] == "success" and "my-copy:latest" in out["listAfterCopy"]
    assert out["copyChat"] is True
    assert out["delete"] == "success"
    assert f"{PULLABLE}:latest" not in out["listAfterDelete"]
    assert "my-copy:latest" not in out["listAfterDelete"]  # a copy goes with its model


def test_a_tool_call_round_trip_with_the_npm_client(ollama_js: Path) -> None:
    with LiveGateway({"model_path": OK, "tool_call_parser": "hermes"}) as gw:
        names = {
            "tools": OK,
            "callPrompt": "say " + hermes_call("get_weather", '{"city": "Graz"}'),
            "answerPrompt": "say Sunny in Graz",
        }
        out = run(ollama_js, gw.url, names)
    assert out["call"] == [
        {
            "id": out["call"][0]["id"],
            "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Graz"}},
        }
    ]
    assert out["answer"] == "Sunny in Graz"
    assert [c["function"]["name"] for c in out["streamedCalls"]] == ["get_weather"]
    assert out["missing"]["status"] == 404 and f"{OK}:latest" in out["missing"]["error"]
