"""The web UI's pull field, in Debian's chromium: a Hugging Face repo id typed into
the models view is pulled from the local stand-in for the hub (progress shown), the
model appears in the table, and a loaded model shows when it will be unloaded.
A separate gateway process (the lab's folders are its own)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.gateway import Gateway
from tests.fixtures.browser import DESKTOP, browser, shoot

from .conftest import PULLABLE, Connect, Lab

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
__all__ = ["browser"]  # the fixture, imported for this module


@pytest.fixture(scope="module")
def ui_lab(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Lab:
    tmp = tmp_path_factory.mktemp("ollama-ui")
    env = {
        **lab.env,
        "HF_HUB_CACHE": str(tmp / "hf-cache"),
        "MLX_GATEWAY_CACHE_DIR": str(tmp / "state"),
    }
    return Lab(tmp, lab.models, env, lab.hub)


@pytest.fixture(scope="module")
def ui_gateway(ui_lab: Lab) -> Iterator[Gateway]:
    gw = ui_lab.start()
    yield gw
    gw.stop()


def test_pull_from_the_models_view(
    browser: Any, ui_gateway: Gateway, ui_lab: Lab, connect: Connect
) -> None:
    page = browser.new_page(viewport=DESKTOP)
    page.goto(ui_gateway.base_url + "/ui")
    page.wait_for_selector('#models tr[data-model="tiny"]')
    page.fill("#pull-repo", PULLABLE)
    page.click("#pull-run")
    page.wait_for_function(
        "document.querySelector('#pull-state').textContent.includes('pulled')", timeout=120_000
    )
    page.wait_for_selector(f'#models tr[data-model="{PULLABLE}"]')
    assert (Path(ui_lab.env["MLX_GATEWAY_CACHE_DIR"]) / "pulled.json").exists()

    client = connect(ui_gateway.base_url)
    client.chat(
        model="tiny",
        messages=[{"role": "user", "content": "hi"}],
        options={"num_predict": 2},
        keep_alive="1h",
    )
    page.reload()
    row = page.locator('#models tr[data-model="tiny"]')
    row.locator("[data-expires]").wait_for()
    assert "unloads at" in row.inner_text()

    page.fill("#pull-repo", "mlx-community/not-there")
    page.click("#pull-run")
    page.wait_for_selector("#notice:not([hidden])")
    assert "no such repo" in page.inner_text("#notice")
    shoot(page, "models-pull")
