"""``mlx-gateway status`` against a real gateway over TCP (fake workers), and its table."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path

import httpx
import pytest

from mlx_gateway.supervisor.cli import main
from mlx_gateway.supervisor.config import load_config
from mlx_gateway.supervisor.status import ago, default_url, human_bytes, table

from .live import LiveGateway

pytestmark = pytest.mark.slow


def test_status_table_of_a_running_gateway(capsys: pytest.CaptureFixture[str]) -> None:
    fake = {"model_path": "fake/ok", "worker_env": {"FAKE_RSS": str(300 * 2**20)}}
    failing = {"model_path": "fake/load-error", "memory_estimate": "1GiB"}
    with LiveGateway(fake, failing, memory_budget="4GiB") as gw:
        body = {"model": "fake/ok", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(f"{gw.url}/v1/chat/completions", json=body).status_code == 200
        r = httpx.post(f"{gw.url}/v1/completions", json={"model": "fake/load-error", "prompt": "x"})
        assert r.status_code == 503
        pid = gw.registry.resolve("fake/ok").pid

        assert main(["status", "--url", gw.url]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split() == [
            "MODEL", "STATE", "PID", "INFLIGHT", "WAITING", "MEMORY", "NEED", "FIT", "LAST",
            "USED", "ERROR",
        ]  # fmt: skip
        ok = lines[1].split()
        assert ok[:5] == ["fake/ok", "ready", str(pid), "0", "0"]
        assert ok[5:11] == ["300.0", "MiB", "300.0", "MiB", "(measured)", "loaded"]
        assert "s ago" in lines[1]
        failed = lines[2]
        assert failed.split()[:3] == ["fake/load-error", "failed", "-"]
        assert "download failed: offline" in failed
        assert "1.0 GiB (configured)  yes" in failed  # it would fit in the budget
        # Only the ready model holds memory; the failed one reserves nothing.
        assert lines[3] == "memory budget 4.0 GiB: 300.0 MiB reserved, 3.7 GiB free"

        assert main(["status", "--url", gw.url, "--json"]) == 0
        entries = json.loads(capsys.readouterr().out)
        assert [e["id"] for e in entries] == ["fake/ok", "fake/load-error"]


def test_status_with_keys_and_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with LiveGateway({"model_path": "fake/ok"}, api_keys=["sk-status"]) as gw:
        assert main(["status", "--url", gw.url]) == 1
        assert "401" in capsys.readouterr().err
        assert main(["status", "--url", gw.url, "--api-key", "sk-status"]) == 0
        assert "fake/ok" in capsys.readouterr().out

        # From the gateway's own config file: its port, its first key.
        config = tmp_path / "gw.yaml"
        config.write_text(
            f"server:\n  host: 0.0.0.0\n  port: {gw.port}\n  api_keys: [sk-status]\n"
            "models:\n  - model_path: fake/ok\n"
        )
        assert default_url(load_config(config)) == f"http://127.0.0.1:{gw.port}"
        assert main(["status", "--config", str(config)]) == 0
        assert "unloaded" in capsys.readouterr().out


def test_status_when_no_gateway_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with LiveGateway({"model_path": "fake/ok"}) as gw:
        url = gw.url
    assert main(["status", "--url", url]) == 1  # stopped: nothing listens there now
    assert "cannot reach the gateway" in capsys.readouterr().err


def test_table_cells() -> None:
    now = 1_000_000.0
    text = table(
        [
            {
                "id": "m",
                "state": "loading",
                "progress": {"fraction": 0.42},
                "pid": 7,
                "inflight": 2,
                "waiting": 5,
                "memory": {"rss": 3 * 2**30},
                "memory_need": 4 * 2**30,
                "memory_need_source": "estimated",
                "last_used": now - 125,
                "error": "first line\nsecond line",
                "fit": {"verdict": "waits", "evict": [], "blockers": ["a", "b"]},
            }
        ],
        now=now,
    )
    row = text.splitlines()[1]
    assert row.split() == ["m", "loading", "42%", "7", "2", "5", "3.0", "GiB", "4.0", "GiB",
                           "(estimated)", "waits", "for", "a,", "b", "2m", "ago", "first",
                           "line"]  # fmt: skip
    assert human_bytes(None) == "-" and human_bytes(512) == "512 B"
    assert human_bytes(1536 * 2**20) == "1.5 GiB"
    assert ago(None, now) == "-" and ago(now - 3 * 86400, now) == "3d ago"


def test_status_lists_the_running_requests(capsys: pytest.CaptureFixture[str]) -> None:
    with LiveGateway({"model_path": "fake/ok"}) as gw:
        body = {"model": "fake/ok", "messages": [{"role": "user", "content": "hang"}]}
        with httpx.Client(base_url=gw.url, timeout=30) as http:

            def post() -> None:
                with contextlib.suppress(httpx.HTTPError):  # cancelled below
                    http.post("/v1/chat/completions", json={**body, "stream": True})

            pending = threading.Thread(target=post)
            pending.start()
            deadline = time.monotonic() + 10
            while not httpx.get(f"{gw.url}/v1/requests").json()["data"]:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert main(["status", "--url", gw.url]) == 0
            out = capsys.readouterr().out.splitlines()
            (running,) = httpx.get(f"{gw.url}/v1/requests").json()["data"]
            assert "requests: 1 running" in out
            line = next(line for line in out if running["id"] in line)
            assert "fake/ok" in line and "/v1/chat/completions" in line
            httpx.post(f"{gw.url}/v1/requests/{running['id']}/cancel")
            pending.join(20)
