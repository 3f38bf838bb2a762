"""The web UI's Usage view in a real browser: a table of totals and a plot per app
and model, read from ``GET /v1/usage`` of a real gateway (fake workers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from tests.fixtures.browser import DESKTOP, browser, shoot

from ..live import LiveGateway

pytestmark = pytest.mark.slow
__all__ = ["browser"]  # the fixture, imported for this module

MODELS = ("fake/ok", "other/fake/ok")


def test_the_usage_view_plots_each_app_and_model(browser: Any, tmp_path: Path) -> None:
    entries = [{"model_path": name} for name in MODELS]
    with LiveGateway(*entries, usage_path=str(tmp_path / "usage.sqlite3")) as gw:
        with openai.OpenAI(base_url=f"{gw.url}/v1", api_key="-", max_retries=0) as sdk:
            for model, times in zip(MODELS, (1, 2), strict=True):
                for _ in range(times):
                    messages: Any = [{"role": "user", "content": "say hello"}]
                    sdk.chat.completions.create(model=model, messages=messages)
        page = browser.new_page(viewport=DESKTOP)
        page.goto(gw.url + "/ui#usage")
        plots = page.locator("#usage-plots figure.usage-series")
        plots.nth(1).wait_for(timeout=20_000)
        assert plots.count() == 2
        caption = page.locator('figure[data-model="other/fake/ok"] figcaption').inner_text()
        assert caption == "anonymous · other/fake/ok: 2 requests"
        bars = page.locator('figure[data-model="other/fake/ok"] rect[data-value="2"]')
        assert bars.count() == 1  # today's bar
        rows = page.locator("#usage-table tbody tr")
        assert rows.count() == 2 and "fake/ok" in rows.nth(0).inner_text()
        page.select_option("#usage-measure", "output_tokens")
        page.wait_for_function(
            "document.querySelector('figure[data-model=\"fake/ok\"] figcaption')"
            ".textContent.endsWith('output tokens')"
        )
        shoot(page, "usage")  # at desktop and phone width
