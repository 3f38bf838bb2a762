"""What clients written for mlx-vlm's server / mlx_lm.server see: routes without
``/v1`` (the openai SDK pointed at the bare host), ``POST /unload``, a model named
by its ``model_path``, and mlx-vlm's ``/health`` fields. The real app over real
TCP (:class:`LiveGateway`), fake workers over real ZeroMQ."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import huggingface_hub.constants
import openai
import pytest

from mlx_gateway.supervisor.config import load_config

from .live import LiveGateway

pytestmark = pytest.mark.slow

A = "lab/fake/ok"
B = "lab/other/ok"


def wait_for(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def test_the_openai_sdk_without_v1_and_names_by_model_path() -> None:
    # The served name differs from model_path; a client of mlx-vlm's server sends
    # the repo id, and points base_url at the bare host (no /v1).
    with LiveGateway({"model_path": A, "served_model_name": "short"}) as gw:
        client = openai.OpenAI(base_url=gw.url, api_key="none", max_retries=0)
        models = client.models.list()
        assert [m.id for m in models.data] == ["short"]
        chat = client.chat.completions.create(
            model=A, messages=[{"role": "user", "content": "say hello there"}]
        )
        assert chat.choices[0].message.content == "hello there"
        assert chat.model == "short"
        response = client.responses.create(model=A, input="say from responses")
        assert response.output_text == "from responses"
        # The /v1 routes are unchanged; a name that is neither is still a clear 404.
        with pytest.raises(openai.NotFoundError) as missing:
            client.chat.completions.create(
                model="lab/nothing", messages=[{"role": "user", "content": "hi"}]
            )
        assert "lab/nothing" in str(missing.value)


def test_health_has_mlx_vlm_fields() -> None:
    with LiveGateway({"model_path": A, "served_model_name": "short"}) as gw:
        body = httpx.get(f"{gw.url}/health").json()
        assert body["status"] == "ok"
        assert body["loaded_model"] is None
        assert body["loaded_adapter"] is None
        chat = {"model": "short", "messages": [{"role": "user", "content": "say x"}]}
        assert httpx.post(f"{gw.url}/chat/completions", json=chat, timeout=30).status_code == 200
        body = httpx.get(f"{gw.url}/health").json()
        assert body["loaded_model"] == A
        assert body["models"]["short"]["state"] == "ready"


def test_unload_stops_every_idle_model_and_keeps_busy_ones() -> None:
    with (
        LiveGateway({"model_path": A}, {"model_path": B}, shutdown_grace=0.5) as gw,
        httpx.Client(base_url=gw.url, timeout=30) as http,
    ):
        for name in (A, B):
            assert http.post(f"/v1/models/{name}/load").status_code == 200
        # B busy with a request that never ends on its own.
        busy = {"model": B, "messages": [{"role": "user", "content": "hang"}], "stream": True}
        done = threading.Event()

        def hold() -> None:
            try:
                with http.stream("POST", "/v1/chat/completions", json=busy) as r:
                    for _ in r.iter_lines():
                        pass
            except httpx.HTTPError:
                pass
            done.set()

        holder = threading.Thread(target=hold)
        holder.start()
        wait_for(lambda: gw.registry.resolve(B).inflight == 1)
        reply = httpx.post(f"{gw.url}/unload", timeout=30)
        assert reply.status_code == 200, reply.text
        assert reply.json()["unloaded"] == [A]
        assert reply.json()["busy"] == [B]
        models = httpx.get(f"{gw.url}/health").json()["models"]
        states = {name: status["state"] for name, status in models.items()}
        assert states == {A: "unloaded", B: "ready"}
        # Now B is unloaded by force through its own route; the stream ends.
        assert http.post(f"/v1/models/{B}/unload", json={"force": True}).status_code == 200
        assert done.wait(30)
        holder.join(30)


def test_unload_is_an_admin_endpoint() -> None:
    with LiveGateway({"model_path": A}, api_keys=["user-key"], admin_keys=["admin-key"]) as gw:
        user = httpx.post(f"{gw.url}/unload", headers={"Authorization": "Bearer user-key"})
        assert user.status_code == 403
        assert user.json()["error"]["type"] == "permission_error"
        admin = httpx.post(f"{gw.url}/unload", headers={"Authorization": "Bearer admin-key"})
        assert admin.status_code == 200
        assert admin.json() == {"status": "ok", "unloaded": [], "busy": []}


def cached_repo(cache: Path, repo_id: str, config: dict[str, Any], weights: bool = True) -> None:
    """A repo as huggingface_hub leaves it in its cache (refs/main → snapshot)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    (snapshot / "config.json").write_text(json.dumps(config))
    if weights:
        (snapshot / "model.safetensors").write_bytes(b"")


def test_serve_hub_cache_lists_and_serves_cached_mlx_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "hub"
    quantized = {"model_type": "qwen3", "quantization": {"bits": 4, "group_size": 64}}
    cached_repo(cache, "lab/ok", quantized)  # an MLX conversion (quantization block)
    cached_repo(cache, "mlx-community/vision-ok", {"model_type": "qwen2_5_vl", "vision_config": {}})
    cached_repo(cache, "torch/ok", {"model_type": "llama"})  # not MLX
    cached_repo(cache, "mlx-community/whisper-tiny", {"model_type": "whisper"})  # not chat
    cached_repo(cache, "mlx-community/no-weights", quantized, weights=False)  # incomplete
    cached_repo(cache, "mlx-community/configured", quantized)  # served by the file already
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    file = tmp_path / "config.yaml"
    file.write_text(
        "server:\n  serve_hub_cache: true\n"
        "models:\n  - model_path: mlx-community/configured\n    served_model_name: mine\n"
    )
    config = load_config(file)
    kinds = {m.served_model_name: m.model_type for m in config.models}
    assert kinds == {"mine": "lm", "lab/ok": "lm", "mlx-community/vision-ok": "vlm"}
    # Off by default: the same file without the switch serves only its own model.
    file.write_text(file.read_text().replace("true", "false"))
    assert [m.served_model_name for m in load_config(file).models] == ["mine"]

    with LiveGateway(config=config) as gw:
        client = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="none", max_retries=0)
        assert sorted(m.id for m in client.models.list().data) == [
            "lab/ok",
            "mine",
            "mlx-community/vision-ok",
        ]
        chat = client.chat.completions.create(
            model="lab/ok", messages=[{"role": "user", "content": "say from the cache"}]
        )
        assert chat.choices[0].message.content == "from the cache"
        assert chat.model == "lab/ok"
