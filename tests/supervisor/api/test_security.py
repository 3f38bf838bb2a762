"""API keys, admin keys, the body cap and the public-bind warning, through the real
app (its middleware stack from the config) with the fake worker behind it."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette

from mlx_gateway.supervisor.app import create_app
from mlx_gateway.supervisor.cli import serve
from mlx_gateway.supervisor.config import GatewayConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.http.auth import KeyRing, exposure_warning, is_admin, is_loopback

from ..fakes import fake_command, fake_config

MODEL = "fake/ok"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi there"}]}


@pytest.fixture
async def make_client() -> AsyncIterator[Any]:
    """``await make_client(**server)``: an httpx client on a fresh app with those
    server settings; every app is shut down (workers stopped) at the end."""
    apps: list[tuple[Starlette, Any]] = []
    clients: list[httpx.AsyncClient] = []

    async def make(*models: dict[str, Any], **server: Any) -> httpx.AsyncClient:
        config = fake_config(*(models or ({"model_path": MODEL},)), **server)
        app = create_app(config, command=fake_command)
        lifespan = app.router.lifespan_context(app)
        await lifespan.__aenter__()
        apps.append((app, lifespan))
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        client = httpx.AsyncClient(transport=transport, base_url="http://gw")
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()
    for _, lifespan in apps:
        await lifespan.__aexit__(None, None, None)


# ---------------------------------------------------------------- keys


def test_key_ring_matches_exactly() -> None:
    ring = KeyRing(["alpha", "béta"])
    assert "alpha" in ring and "béta" in ring
    assert "alph" not in ring and "alphaa" not in ring and "" not in ring
    assert None not in ring
    assert not KeyRing([])


@pytest.mark.parametrize(
    ("method", "path", "admin"),
    [
        ("GET", "/metrics", True),
        ("POST", "/v1/models/org/name/load", True),
        ("POST", "/v1/models/x/unload", True),
        ("GET", "/v1/models/org/load", False),  # retrieving a model whose id ends in /load
        ("POST", "/v1/chat/completions", False),
        ("GET", "/health", False),
    ],
)
def test_admin_endpoints(method: str, path: str, admin: bool) -> None:
    assert is_admin(method, path) is admin


async def test_no_keys_everything_open(make_client: Any) -> None:
    http = await make_client()
    assert (await http.get("/v1/models")).status_code == 200
    assert (await http.get("/metrics")).status_code == 200


async def test_api_keys(make_client: Any) -> None:
    http = await make_client(api_keys=["sk-one", "sk-two"])
    r = await http.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 401
    error = r.json()["error"]
    assert error["type"] == "authentication_error"
    assert error["code"] == "missing_api_key"
    assert r.headers["www-authenticate"].startswith("Bearer")

    r = await http.get("/v1/models", headers={"Authorization": "Bearer sk-wrong"})
    assert r.status_code == 401
    assert r.json()["error"]["code"] == "invalid_api_key"
    r = await http.get("/v1/models", headers={"Authorization": "Basic sk-one"})
    assert r.status_code == 401

    assert (await http.get("/v1/models", headers={"Authorization": "Bearer sk-two"})).is_success
    assert (await http.get("/v1/models", headers={"authorization": "bearer sk-one"})).is_success
    assert (await http.get("/v1/models", headers={"x-api-key": "sk-one"})).is_success
    # /health is open; admin endpoints take a client key when no admin_keys are set.
    assert (await http.get("/health")).status_code == 200
    assert (await http.get("/metrics")).status_code == 401
    assert (await http.get("/metrics", headers={"x-api-key": "sk-one"})).status_code == 200
    # A bad key is refused before the body is read, even a huge declared one.
    r = await http.post(
        "/v1/chat/completions", content=b"{}", headers={"content-length": str(10**12)}
    )
    assert r.status_code == 401


async def test_the_openai_sdk_sends_its_key(make_client: Any) -> None:
    http = await make_client(api_keys=["sk-sdk"])

    def sdk(key: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            base_url="http://gw/v1", api_key=key, http_client=http, max_retries=0
        )

    with pytest.raises(openai.AuthenticationError):
        await sdk("sk-other").chat.completions.create(**CHAT)
    reply = await sdk("sk-sdk").chat.completions.create(**CHAT)
    assert reply.choices[0].message.content == "hi there "


async def test_admin_keys(make_client: Any) -> None:
    http = await make_client(api_keys=["client"], admin_keys=["admin"])
    r = await http.get("/metrics", headers={"x-api-key": "client"})
    assert r.status_code == 403
    assert r.json()["error"]["type"] == "permission_error"
    assert (await http.get("/metrics")).status_code == 401
    assert (await http.get("/metrics", headers={"x-api-key": "admin"})).status_code == 200
    # An admin key opens the client endpoints too.
    assert (await http.get("/v1/models", headers={"x-api-key": "admin"})).is_success


async def test_admin_keys_alone_protect_only_admin(make_client: Any) -> None:
    http = await make_client(admin_keys=["admin"])
    assert (await http.get("/v1/models")).is_success
    assert (await http.get("/metrics")).status_code == 401
    assert (await http.get("/metrics", headers={"Authorization": "Bearer admin"})).is_success


# ---------------------------------------------------------------- body cap


async def test_body_cap_by_content_length(make_client: Any) -> None:
    http = await make_client(max_body_mb=0.001)  # 1048 bytes
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 2000}]}
    r = await http.post("/v1/chat/completions", json=big)
    assert r.status_code == 413
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "request_too_large"
    assert "server.max_body_mb" in error["message"]
    ok = await http.post("/v1/chat/completions", json=CHAT)
    assert ok.status_code == 200


async def test_body_cap_counts_streamed_bytes(make_client: Any) -> None:
    """A chunked body (no Content-Length) is cut off once it passes the cap."""
    http = await make_client(max_body_mb=0.001)
    sent = 0

    async def body() -> AsyncIterator[bytes]:
        nonlocal sent
        for _ in range(100):
            sent += 100
            yield b" " * 100

    r = await http.post("/v1/chat/completions", content=body())
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"


async def test_upload_routes_get_the_upload_limit(make_client: Any) -> None:
    """The audio endpoints are bounded by the speech models' max_upload_mb, not by
    max_body_mb; their own 413 (per model) is the upload's."""
    http = await make_client(
        {"model_path": MODEL},
        {"model_path": "fake/speech", "model_type": "whisper", "max_upload_mb": 0.01},
        max_body_mb=0.001,
    )
    audio = b"\0" * 5000  # over max_body_mb, under max_upload_mb
    r = await http.post(
        "/v1/audio/transcriptions", files={"file": ("a.wav", audio)}, data={"model": "nope"}
    )
    assert r.status_code == 404  # read within the limit, then the model is unknown
    r = await http.post(
        "/v1/audio/transcriptions",
        files={"file": ("a.wav", b"\0" * 200_000)},
        data={"model": "fake/speech"},
    )
    assert r.status_code == 413


# ---------------------------------------------------------------- binding


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("192.168.1.5", False), ("gw.lan", False)],
)  # fmt: skip
def test_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_exposure_warning() -> None:
    assert exposure_warning("127.0.0.1", []) is None
    assert exposure_warning("0.0.0.0", ["k"]) is None
    warning = exposure_warning("0.0.0.0", [])
    assert warning is not None and "api_keys" in warning


async def test_launch_warns_when_public_without_keys(
    caplog: pytest.LogCaptureFixture, unused_tcp_port: int
) -> None:
    """The real launch path logs the warning (then serves until stopped)."""
    import asyncio
    import os
    import signal

    config = GatewayConfig(
        server=ServerConfig(host="0.0.0.0", port=unused_tcp_port),
        models=[model_entry(model_path="fake/ok", served_model_name="fake/ok")],
    )
    caplog.set_level(logging.WARNING, logger="mlx_gateway")
    task = asyncio.create_task(serve(config))
    for _ in range(100):
        if "without server.api_keys" in caplog.text:
            break
        await asyncio.sleep(0.02)
    os.kill(os.getpid(), signal.SIGINT)  # serve() stops on SIGINT, as at the terminal
    await asyncio.wait_for(task, 10)
    assert "binding 0.0.0.0 without server.api_keys" in caplog.text


def test_route_limits_follow_the_models_files() -> None:
    """File-carrying paths get caps that fit the largest files the models accept."""
    from mlx_gateway.supervisor.http.middleware import route_limits

    mib = 2**20
    models = [
        model_entry(model_path="a", model_type="lm"),
        model_entry(
            model_path="v",
            model_type="vlm",
            max_image_mb=3,
            max_images=2,
            max_video_mb=3,
            max_videos=1,
        ),
        model_entry(model_path="w", model_type="whisper", max_upload_mb=50),
        model_entry(model_path="i", model_type="image-edit", max_image_mb=10),
    ]
    limits = route_limits(models)
    # 2 x 3 MiB of images and 3 MiB of video in base64, + text
    assert limits["/v1/chat/completions"] == limits["/v1/responses"] == 12 * mib + mib
    assert limits["/v1/audio/"] == 50 * mib + 64 * 1024
    assert limits["/v1/images/edits"] == 5 * 10 * mib + 64 * 1024
    assert route_limits(models[:1]) == {}
