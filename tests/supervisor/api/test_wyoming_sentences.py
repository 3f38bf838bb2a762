"""The Wyoming server's sentence buffer (streamed synthesis) and its WAV wrapping."""

from __future__ import annotations

import io
import wave

from mlx_gateway.supervisor.api.wyoming.handler import wav_file
from mlx_gateway.supervisor.engine.sentences import SentenceBuffer


def test_sentences_come_out_once_complete() -> None:
    buffer = SentenceBuffer()
    assert buffer.add("The quick brown fox") == []
    assert buffer.add(" jumps. It was") == ["The quick brown fox jumps."]
    assert buffer.add(" sunny!  Nobody saw") == ["It was sunny!"]
    assert buffer.add(" it.") == []  # nothing follows the stop yet: maybe "it.5"
    assert buffer.finish() == "Nobody saw it."
    assert buffer.finish() == ""


def test_paragraphs_and_cjk_stops() -> None:
    buffer = SentenceBuffer()
    assert buffer.add("A title\n\nThen text") == ["A title"]
    assert buffer.add("\u4f60\u597d\u3002\u518d\u89c1") == ["Then text\u4f60\u597d\u3002"]
    assert buffer.finish() == "\u518d\u89c1"


def test_wav_file_holds_the_pcm() -> None:
    pcm = bytes(range(200)) * 10
    with wave.open(io.BytesIO(wav_file(pcm, 16_000, 2, 1))) as read:
        assert (read.getframerate(), read.getsampwidth(), read.getnchannels()) == (16_000, 2, 1)
        assert read.readframes(read.getnframes()) == pcm
