"""The web UI at /ui, driven in a real headless Chromium (Debian's ``chromium``) by
Playwright, against the real gateway app over TCP with fake workers.

Screenshots of each view at desktop and phone width are written to
``build/ui-screenshots/`` (see tests/fixtures/browser.py).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import msgspec
import pytest

from mlx_gateway.supervisor.config.routes import RouteConfig
from tests.fixtures.browser import DESKTOP, browser, shoot

from ..fakes import fake_config, worker_output
from ..live import LiveGateway

pytestmark = pytest.mark.slow
__all__ = ["browser"]  # the fixture, imported for this module

CLIENT_KEY, ADMIN_KEY = "client-key-1", "admin-key-1"


@pytest.fixture
def gateway() -> Iterator[LiveGateway]:
    models = (
        {
            "model_path": "fake/ok",
            "served_model_name": "chat-model",
            "adapters": {"sql": "/adapters/sql", "style": "/adapters/style"},
        },
        {"model_path": "fake/slow-start", "served_model_name": "slow-model"},
    )
    config = fake_config(*models, api_keys=[CLIENT_KEY], admin_keys=[ADMIN_KEY])
    route = RouteConfig(name="any-chat", models=("chat-model", "slow-model"))
    with LiveGateway(config=msgspec.structs.replace(config, routes=[route])) as gw:
        yield gw


def _admin(gw: LiveGateway, path: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    return httpx.post(gw.url + path, headers=headers, timeout=30)


def _use_key(page: Any, key: str) -> None:
    page.fill("#key", key)
    page.press("#key", "Enter")
    page.locator("#key").dispatch_event("change")


def test_ui_models_chat_logs_and_admin_actions(
    browser: Any, gateway: LiveGateway, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)  # as `mlx-gateway launch` sets it
    page = browser.new_page(viewport=DESKTOP)
    page.goto(gateway.url + "/ui")
    # Without a key the page says what is missing (the API's 401).
    page.wait_for_selector("#notice:not([hidden])")
    assert "API key" in page.inner_text("#notice")

    _use_key(page, CLIENT_KEY)
    row = page.locator('tr[data-model="chat-model"]')
    row.wait_for()
    assert row.locator(".state").inner_text() == "unloaded"
    assert page.locator('tr[data-model="slow-model"]').count() == 1
    # A route is no row of the models table; the playground offers it.
    assert page.locator('tr[data-model="any-chat"]').count() == 0
    assert page.locator('#pg-model option[value="any-chat"]').count() == 1

    # The table follows a load made elsewhere (here by the admin API).
    assert _admin(gateway, "/v1/models/chat-model/load").status_code == 200
    page.wait_for_function(
        "document.querySelector('tr[data-model=\"chat-model\"] .state').textContent === 'ready'",
        timeout=20_000,
    )
    shoot(page, "models")

    # Playground: a streamed chat answer appears.
    page.click('nav button[data-view="playground"]')
    page.select_option("#pg-model", "chat-model")
    page.fill("#chat-input", "say hello from the gateway")
    page.click("#chat-send")
    answer = page.locator(".msg.assistant").last
    page.wait_for_function(
        "[...document.querySelectorAll('.msg.assistant')].pop()?.textContent"
        ".includes('hello from the gateway')",
        timeout=20_000,
    )
    assert "error" not in answer.inner_text()
    # The model's LoRA adapters: one picked in the list goes with the request.
    assert page.is_visible("#chat-adapter-label")
    options = page.locator("#chat-adapter option").all_inner_texts()
    assert options == ["model default", "none (base model)", "sql", "style"]
    page.select_option("#chat-adapter", "style")
    page.fill("#chat-input", "adapters")  # the fake worker answers with the adapter ids
    page.click("#chat-send")
    page.wait_for_function(
        "[...document.querySelectorAll('.msg.assistant')].pop()?.textContent.includes('style')",
        timeout=20_000,
    )
    page.select_option("#chat-adapter", "")
    page.fill("#chat-input", "adapters")
    page.click("#chat-send")
    page.wait_for_function(
        "[...document.querySelectorAll('.msg.assistant')].pop()?.textContent.includes('base')",
        timeout=20_000,
    )
    shoot(page, "playground")

    # Logs need the admin key: with the client key the page says so.
    page.click('nav button[data-view="logs"]')
    page.wait_for_function(
        "document.querySelector('#notice').textContent.includes('admin key')", timeout=10_000
    )
    _use_key(page, ADMIN_KEY)
    page.wait_for_function(
        "document.querySelector('#log-state').textContent === 'live'", timeout=10_000
    )
    # Recent lines came first (the worker's start), then a new line arrives live.
    page.wait_for_function(
        "document.querySelector('#log-lines').textContent.includes('[chat-model]')",
        timeout=10_000,
    )
    logging_line = "ui-test-marker-line"
    logging.getLogger("mlx_gateway.test").warning("[%s] %s", "chat-model", logging_line)
    page.wait_for_function(
        f"document.querySelector('#log-lines').textContent.includes('{logging_line}')",
        timeout=10_000,
    )
    # The model filter keeps one model's lines.
    page.select_option("#log-model", "slow-model")
    page.wait_for_function(
        "document.querySelector('#log-state').textContent === 'live'", timeout=10_000
    )
    assert logging_line not in page.inner_text("#log-lines")
    page.select_option("#log-model", "")
    page.wait_for_function(
        f"document.querySelector('#log-lines').textContent.includes('{logging_line}')",
        timeout=10_000,
    )
    shoot(page, "logs")

    # Unload is refused with the client key (403), and works with the admin key.
    page.click('nav button[data-view="models"]')
    _use_key(page, CLIENT_KEY)
    page.locator('tr[data-model="chat-model"] button[data-action="unload"]').click()
    page.wait_for_function(
        "document.querySelector('#notice').textContent.includes('refused')", timeout=10_000
    )
    assert gateway.registry.resolve("chat-model").state.public == "ready"
    _use_key(page, ADMIN_KEY)
    page.locator('tr[data-model="chat-model"] button[data-action="unload"]').click()
    page.wait_for_function(
        "document.querySelector('tr[data-model=\"chat-model\"] .state').textContent === 'unloaded'",
        timeout=20_000,
    )
    # Pin (admin key): the model is pinned at run time and the table says so.
    page.locator('tr[data-model="slow-model"] button[data-action="pin"]').click()
    page.wait_for_function(
        "document.querySelector('tr[data-model=\"slow-model\"]').textContent.includes('pinned')",
        timeout=10_000,
    )
    assert gateway.registry.resolve("slow-model").pinned
    page.close()


def test_ui_files_are_open_and_the_data_is_not(gateway: LiveGateway) -> None:
    """The page and its files need no key (they hold no data); stats need a client
    key, logs the admin key; an unknown file is a 404."""
    page = httpx.get(gateway.url + "/ui")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    script = httpx.get(gateway.url + "/ui/static/app.js")
    assert script.status_code == 200 and "javascript" in script.headers["content-type"]
    assert httpx.get(gateway.url + "/ui/static/missing.js").status_code == 404
    assert httpx.get(gateway.url + "/ui/static/..%2Fapp.py").status_code == 404
    assert httpx.get(gateway.url + "/ui/stats").status_code == 401
    client = {"Authorization": f"Bearer {CLIENT_KEY}"}
    stats = httpx.get(gateway.url + "/ui/stats", headers=client)
    assert stats.status_code == 200 and "models" in stats.json()
    assert httpx.get(gateway.url + "/ui/logs", headers=client).status_code == 403


def test_ui_lists_running_requests_and_cancels_one(browser: Any, gateway: LiveGateway) -> None:
    """The models view lists the requests running (an admin endpoint: shown with
    the admin key) and its Cancel button ends one as a client's disconnect would."""
    body = {"model": "chat-model", "messages": [{"role": "user", "content": "hang"}]}
    headers = {"Authorization": f"Bearer {CLIENT_KEY}"}

    def post() -> None:
        with contextlib.suppress(httpx.HTTPError):  # cut by the cancel
            httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=headers, timeout=60)

    pending = threading.Thread(target=post)
    pending.start()
    page = browser.new_page(viewport=DESKTOP)
    page.goto(gateway.url + "/ui")
    _use_key(page, ADMIN_KEY)
    row = page.locator("#requests tr[data-request]")
    row.wait_for(timeout=20_000)
    assert "chat-model" in row.inner_text() and "/v1/chat/completions" in row.inner_text()
    shoot(page, "requests")
    row.locator("button[data-action=cancel]").click()
    pending.join(20)
    assert not pending.is_alive()
    handle = gateway.registry.resolve("chat-model")
    page.wait_for_function("!document.querySelector('#requests tr[data-request]')", timeout=20_000)
    assert any(line.startswith("cancelled ") for line in worker_output(handle))
