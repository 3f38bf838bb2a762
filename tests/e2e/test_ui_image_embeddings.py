"""The playground's embeddings panel with an image-embedding model (the tiny SigLIP)
behind the real ``mlx-gateway`` command, in Debian's chromium: a picked image is
embedded with the texts and they are ranked by their similarity to it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.fixtures.browser import DESKTOP, browser, shoot

from .gateway import Gateway

pytestmark = pytest.mark.slow
__all__ = ["browser"]  # the fixture, imported for this module


@pytest.fixture(scope="module")
def gateway(tiny_siglip_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    model = {"served_model_name": "siglip", "model_path": str(tiny_siglip_path)}
    gw = Gateway(tmp_path_factory.mktemp("ui"), [{**model, "model_type": "embeddings"}])
    yield gw
    gw.stop()


def test_an_image_finds_its_nearest_text(browser: Any, gateway: Gateway, tmp_path: Path) -> None:
    picture = tmp_path / "red.png"
    Image.new("RGB", (64, 48), (200, 30, 40)).save(picture)
    page = browser.new_page(viewport=DESKTOP)
    page.goto(gateway.base_url + "/ui#playground")
    page.wait_for_function(
        "[...document.querySelectorAll('#pg-model option')].some(o => o.value === 'siglip')"
    )
    page.select_option("#pg-model", "siglip")
    page.fill("#emb-input", "a photo of a cat\nhello world\na photo of a dog")
    page.set_input_files("#emb-image", str(picture))  # embeds on change
    page.wait_for_selector("#emb-image-out table", timeout=60_000)
    rows = page.locator("#emb-image-out tr")
    assert rows.count() == 3
    scores = [float(t) for t in rows.locator("td").all_inner_texts()]
    assert scores == sorted(scores, reverse=True) and all(-1 <= s <= 1 for s in scores)
    assert page.locator("#emb-image-out tr.nearest").count() == 1
    assert page.locator("#emb-image-out img.emb-thumb").count() == 1
    shoot(page, "playground-image-embeddings")
    page.close()
