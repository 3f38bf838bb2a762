"""The web UI's talk tab against the real ``mlx-gateway`` command and real workers
(Whisper tiny.en, the tiny random llama, the tiny random Soprano), in Debian's
chromium with a fake microphone: chromium plays the espeak-ng fox clip (a WAV, with
silence around it) as the microphone's input. The page streams it to ``/v1/realtime``
(the key in the browser's subprotocol), the gateway's VAD finds the turn, and the page
shows the transcript, the assistant's text and the audio it played."""

from __future__ import annotations

import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlx_gateway.workers.common.audio import decode_audio
from tests.fixtures.browser import CHROMIUM, CHROMIUM_ARGS, DESKTOP, shoot
from tests.fixtures.whisper import FOX_CLIPS

from .gateway import Gateway
from .test_realtime import LM, voice_models

pytestmark = pytest.mark.slow

KEY = "sk-talk-test"
CLIP_WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog"]
"""The fox clip's words. Whisper tiny.en transcribes the clip word for word when
the browser captures it whole, but chromium's fake microphone drops frames when the
machine is busy (a fresh run's other tests beside it): then the words come out
garbled ("The quick ground fog stump so when the laser nod."). What this test checks
is that the microphone's audio reached the transcriber and its transcript the page,
so a user message with two of the clip's words or more is the clip heard; silence
or noise transcribes to none or one ("you", "Thank you.")."""
HEARD = (
    "[...document.querySelectorAll('#talk-log .msg.user')].some(m => {"
    " const said = new Set(m.textContent.toLowerCase().match(/[a-z]+/g) || []);"
    f" return {CLIP_WORDS!r}.filter(w => said.has(w)).length >= 2; }})"
)
TIMEOUT = 240_000
"""Milliseconds: three cold workers on a busy 2-core machine."""


def microphone_wav(path: Path, rate: int = 16_000) -> Path:
    """The fox clip as a 16-bit mono WAV, 1 s of silence before and 8 s after (the
    VAD's end of turn, then quiet while the answer plays)."""
    samples = np.concatenate(list(decode_audio(FOX_CLIPS[0].read_bytes())))
    pcm = (np.clip(samples, -1, 1) * 32767).astype("<i2")
    audio = np.concatenate([np.zeros(rate, "<i2"), pcm, np.zeros(8 * rate, "<i2")])
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(audio.tobytes())
    return path


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """chromium whose microphone is the fox clip, played once (``%noloop``)."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    wav = microphone_wav(tmp_path_factory.mktemp("mic") / "fox.wav")
    args = [
        *CHROMIUM_ARGS,
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={wav}%noloop",
        "--autoplay-policy=no-user-gesture-required",
    ]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=args)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def gateway(
    tiny_en_path: Path,
    tiny_lm_path: Path,
    tiny_soprano_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Gateway]:
    models = voice_models(tiny_en_path, tiny_lm_path, tiny_soprano_path, max_tokens=6)
    # a short answer (the page sets no max_tokens): a few sentences to speak, not the
    # tiny lm's up to 2048 tokens, each spoken by the TTS worker before it plays
    models[1]["max_tokens"] = 12
    gw = Gateway(tmp_path_factory.mktemp("talk"), models, api_keys=[KEY])
    yield gw
    gw.stop()


def test_talk_hears_the_microphone_and_plays_the_answer(browser: Any, gateway: Gateway) -> None:
    page = browser.new_page(viewport=DESKTOP)
    page.goto(gateway.base_url + "/ui#talk")
    page.fill("#key", KEY)
    page.press("#key", "Enter")
    # only lm entries are offered; the voice field shows since a tts entry exists
    page.wait_for_function("document.querySelector('#talk-model').options.length > 0")
    assert page.eval_on_selector_all("#talk-model option", "os => os.map(o => o.value)") == [LM]
    assert page.is_visible("#talk-voice")
    page.click("#talk-start")
    wait_on_page(page, gateway, HEARD, "the transcript of the microphone's fox clip")
    answered = "document.querySelector('#talk-log .msg.assistant')?.textContent.trim().length > 0"
    wait_on_page(page, gateway, answered, "the assistant's answer")
    # the answer's audio arrived as deltas and the page played it to its end
    played = "Number(document.querySelector('#talk-stats').dataset.playedMs) > 0"
    wait_on_page(page, gateway, played, "the answer's audio played")
    stats = page.eval_on_selector("#talk-stats", "s => ({...s.dataset})")
    assert int(stats["chunks"]) > 0
    assert int(stats["receivedMs"]) >= int(stats["playedMs"]) > 0
    assert page.is_hidden("#notice"), page.inner_text("#notice")
    user = page.locator("#talk-log .msg").first
    assert "user" in (user.get_attribute("class") or "")
    shoot(page, "talk")
    page.click("#talk-stop")
    page.wait_for_function("document.querySelector('#view-talk').dataset.state === 'stopped'")
    assert page.is_enabled("#talk-start") and page.is_disabled("#talk-stop")
    page.close()


def wait_on_page(page: Any, gateway: Gateway, condition: str, what: str) -> None:
    """Wait for ``condition`` on the page; on a timeout, fail naming ``what`` with the
    page's talk log, its stats, its notice and the end of the gateway's log."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(condition, timeout=TIMEOUT)
    except PlaywrightTimeout:
        state = page.eval_on_selector("#view-talk", "v => v.dataset.state")
        talk_log = page.inner_text("#talk-log")
        stats = page.eval_on_selector("#talk-stats", "s => ({...s.dataset})")
        notice = page.inner_text("#notice")
        raise AssertionError(
            f"no {what} within {TIMEOUT / 1000:g} s; talk state {state!r}, log {talk_log!r}, "
            f"stats {stats}, notice {notice!r}; the gateway's log ends:\n{gateway.log()[-4000:]}"
        ) from None
