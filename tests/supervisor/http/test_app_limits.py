"""An app's limits over time (a clock the test moves), and the Caller the auth
middleware puts on every request it lets through."""

from __future__ import annotations

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from mlx_gateway.supervisor.config.apps import KeyConfig
from mlx_gateway.supervisor.http.app_limits import AppLimitExceeded, AppLimits
from mlx_gateway.supervisor.http.auth import AuthMiddleware
from mlx_gateway.supervisor.http.caller import caller_of
from mlx_gateway.supervisor.http.keyring import fingerprint
from mlx_gateway.supervisor.pool.scope import current_scope


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limits(**given: int) -> tuple[AppLimits, Clock]:
    clock = Clock()
    return AppLimits(KeyConfig(name="app", key="sk-x", **given), clock), clock


def refused(app: AppLimits) -> AppLimitExceeded:
    with pytest.raises(AppLimitExceeded) as info:
        app.admit()
    return info.value


def test_requests_per_minute_slide() -> None:
    app, clock = limits(requests_per_minute=2)
    app.admit()
    app.release(0)
    clock.now += 30
    app.admit()
    app.release(0)
    error = refused(app)
    assert error.param == "requests_per_minute" and error.headers["Retry-After"] == "30"
    clock.now += 30  # the first has aged out
    app.admit()
    assert refused(app).headers["Retry-After"] == "30"


def test_tokens_are_charged_after_the_answer() -> None:
    app, clock = limits(tokens_per_minute=100, tokens_per_day=150)
    app.admit()
    app.admit()  # nothing used yet: both in
    app.release(80)
    app.release(40)  # 120: over the minute's 100
    assert refused(app).param == "tokens_per_minute"
    clock.now += 61
    app.admit()
    app.release(40)  # 160 today
    error = refused(app)
    assert error.param == "tokens_per_day"
    assert 86000 < int(error.headers["Retry-After"]) <= 86400
    clock.now += 86400
    app.admit()


def test_max_concurrent() -> None:
    app, _ = limits(max_concurrent=2)
    app.admit()
    app.admit()
    error = refused(app)
    assert error.param == "max_concurrent" and error.status == 429
    app.release(0)
    app.admit()


async def test_every_request_let_through_carries_its_app() -> None:
    seen: list[tuple[str, str, object]] = []

    async def echo(scope: Scope, receive: Receive, send: Send) -> None:
        caller = caller_of(scope)
        seen.append((caller.name, caller.role, current_scope()))
        await JSONResponse({"app": caller.name})(scope, receive, send)

    guarded = AuthMiddleware(
        echo,
        api_keys=["sk-short"],
        admin_keys=["sk-admin"],
        keys=[KeyConfig(name="agent", key="sk-agent", models=["q*"], priority="batch")],
    )
    transport = httpx.ASGITransport(guarded)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        for key in ("sk-agent", "sk-short", "sk-admin"):
            answer = await client.get("/v1/models", headers={"x-api-key": key})
            assert answer.status_code == 200
        assert (await client.get("/v1/models")).status_code == 401
    assert seen == [
        ("agent", "client", ("q*",)),
        (f"key-{fingerprint('sk-short')}", "client", None),
        (f"admin-{fingerprint('sk-admin')}", "admin", None),
    ]
    assert current_scope() is None  # set for the request only


def test_a_request_without_the_middleware_is_anonymous() -> None:
    request = Request({"type": "http", "state": {}})
    assert caller_of(request.scope).name == "anonymous"
