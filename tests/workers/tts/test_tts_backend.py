"""The tts backend in-process (no sockets) on the tiny random Soprano: the reply
sequence, every response format decoded by PyAV, voices, cancels and turn-taking."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest

from mlx_gateway.protocol.messages import (
    Done,
    Error,
    Reply,
    SpeechChunk,
    Started,
    Synthesize,
    Transcribe,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.runtime.contract import RequestError
from mlx_gateway.workers.runtime.random_state import repair_random_state
from mlx_gateway.workers.tts.backend import TtsBackend
from mlx_gateway.workers.tts.text import split_text
from tests.fixtures.tiny_soprano import SAMPLE_RATE, TOKEN_SAMPLES

pytestmark = pytest.mark.slow

TOKENS = 6
"""Tokens per sentence the model is given (it never stops before)."""
SENTENCE_SECONDS = TOKENS * TOKEN_SAMPLES / SAMPLE_RATE  # 0.384 s
RATES = {"mp3": SAMPLE_RATE, "opus": 48_000, "aac": SAMPLE_RATE, "flac": SAMPLE_RATE}
RATES |= {"wav": SAMPLE_RATE, "pcm": 24_000}
ONE = "The quick brown fox jumps over the lazy dog."
THREE = f"{ONE} It was a sunny day. Nobody saw it happen!"
ALIASES = {"alloy": None, "echo": None}


def make_backend(model: Path, **options: object) -> tuple[TtsBackend, list[tuple[Reply, list]]]:
    replies: list[tuple[Reply, list]] = []
    spec = WorkerSpec(
        worker_id="w",
        kind="tts",
        model_path=str(model),
        served_model_name="tiny-tts",
        max_concurrency=2,
        options={
            "generate_kwargs": {"max_tokens": TOKENS},
            "voice_aliases": ALIASES,
            **options,
        },
    )
    backend = TtsBackend()
    backend.load(spec, lambda msg, payloads=(): replies.append((msg, [bytes(p) for p in payloads])))
    return backend, replies


@pytest.fixture(scope="module")
def tts(tiny_soprano_path: Path) -> tuple[TtsBackend, list[tuple[Reply, list]]]:
    return make_backend(tiny_soprano_path)


def run(backend: TtsBackend, limit: int = 500) -> int:
    for steps in range(limit):
        if not backend.has_work():
            return steps
        backend.step()
    raise AssertionError("the backend never went idle")


def of(replies: list[tuple[Reply, list]], request_id: str) -> list[tuple[Reply, list]]:
    return [(r, p) for r, p in replies if getattr(r, "request_id", None) == request_id]


def audio_of(events: list[tuple[Reply, list]]) -> bytes:
    return b"".join(p[0] for r, p in events if isinstance(r, SpeechChunk))


def decoded(data: bytes, fmt: str) -> tuple[int, float]:
    """(sample rate, seconds) of an audio file, decoded by PyAV."""
    if fmt == "pcm":
        return 24_000, len(data) / 2 / 24_000
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        samples = sum(frame.samples for frame in container.decode(stream))
        return stream.rate, samples / stream.rate


def test_the_model_loads_through_mlx_audio_and_tells_its_facts(tts) -> None:
    backend, _ = tts
    assert type(backend.model).__module__.startswith("mlx_audio.tts.models.soprano")
    assert backend.sample_rate == SAMPLE_RATE
    # no voice list of its own: "default", and the aliases
    assert backend.voices is not None
    assert backend.voices.names() == ["default", "alloy", "echo"]


def test_reply_sequence_started_chunks_done(tts) -> None:
    backend, replies = tts
    backend.submit(Synthesize(request_id="seq", input=THREE, response_format="pcm"), [])
    first = of(replies, "seq")
    assert [type(r) for r, _ in first] == [Started]  # accepted before any work
    run(backend)
    events = of(replies, "seq")
    kinds = [type(r) for r, _ in events]
    assert kinds[0] is Started and kinds[-1] is Done
    assert all(k is SpeechChunk for k in kinds[1:-1])
    chunks = [(r, p) for r, p in events if isinstance(r, SpeechChunk)]
    # one chunk per sentence with its bytes, then the file's (empty for pcm) tail
    assert len(chunks) == 4
    assert all(p[0] for _, p in chunks[:3])
    assert [r.seconds for r, _ in chunks[:3]] == [pytest.approx(SENTENCE_SECONDS)] * 3
    done = events[-1][0]
    assert isinstance(done, Done) and done.finish_reason == "stop"
    assert done.usage.prompt_tokens == len(THREE)
    assert done.usage.completion_tokens == round(3 * SENTENCE_SECONDS * 1000)
    assert backend.counts() == (0, 0)


LONG = 40
"""Tokens of a long sentence: 2.56 s of audio, more than two of the worker's
streaming intervals (``STREAMING_INTERVAL``, for models that stream)."""


class DecoderCalls:
    """Soprano's own decoder, run as it is, with the frames (hidden states, one per
    token) of each call written down."""

    def __init__(self, decoder: Callable[..., Any]) -> None:
        self.decoder = decoder
        self.frames: list[int] = []

    def __call__(self, hidden_states: Any, *args: Any, **kwargs: Any) -> Any:
        self.frames.append(int(hidden_states.shape[1]))
        return self.decoder(hidden_states, *args, **kwargs)


def test_long_sentences_are_decoded_once_each_as_in_process(tiny_soprano_path: Path) -> None:
    """The worker decodes what mlx-audio in process decodes, no more: one decoder
    call per sentence over that sentence's frames, never the audio so far again at
    each chunk (work that grows with the square of the length)."""
    import mlx.core as mx

    backend, replies = make_backend(tiny_soprano_path, generate_kwargs={"max_tokens": LONG})
    model = backend.model
    calls = DecoderCalls(model.decoder)
    model.decoder = calls  # this test's own model (make_backend loads one)
    text = f"{ONE} It was a sunny day."
    backend.submit(Synthesize(request_id="long", input=text, response_format="pcm"), [])
    run(backend)
    worker = list(calls.frames)
    calls.frames.clear()
    for piece in split_text(text):  # the worker's sentences, one generate each
        for result in model.generate(text=piece, max_tokens=LONG, verbose=False):
            mx.eval(result.audio)
    # each sentence: the prompt's last hidden state and LONG tokens, decoded once
    assert worker == calls.frames == [LONG + 1, LONG + 1]
    chunks = [r for r, _ in of(replies, "long") if isinstance(r, SpeechChunk)]
    assert [c.seconds for c in chunks[:-1]] == [
        pytest.approx(LONG * TOKEN_SAMPLES / SAMPLE_RATE)
    ] * 2
    assert len(audio_of(of(replies, "long"))) / 2 / 24_000 == pytest.approx(
        2 * LONG * TOKEN_SAMPLES / SAMPLE_RATE, abs=0.01
    )


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_every_format_decodes_at_its_rate_and_grows_with_the_input(tts, fmt: str) -> None:
    backend, replies = tts
    seconds = {}
    for text in (ONE, THREE):
        request_id = f"{fmt}-{len(text)}"
        backend.submit(Synthesize(request_id=request_id, input=text, response_format=fmt), [])
        run(backend)
        rate, seconds[text] = decoded(audio_of(of(replies, request_id)), fmt)
        assert rate == RATES[fmt]
    # encoders pad a little (priming, a last frame), never a whole sentence
    assert seconds[ONE] == pytest.approx(SENTENCE_SECONDS, abs=0.1)
    assert seconds[THREE] == pytest.approx(3 * SENTENCE_SECONDS, abs=0.1)


@pytest.mark.parametrize("speed", [0.25, 0.5, 2.0, 4.0])
def test_speed_of_a_model_without_its_own_setting(tts, speed: float) -> None:
    """Soprano's generate has no speed: FFmpeg's atempo changes the samples' tempo."""
    backend, replies = tts
    request_id = f"speed-{speed}"
    backend.submit(
        Synthesize(request_id=request_id, input=THREE, response_format="flac", speed=speed), []
    )
    run(backend)
    events = of(replies, request_id)
    rate, seconds = decoded(audio_of(events), "flac")
    assert rate == SAMPLE_RATE
    assert seconds == pytest.approx(3 * SENTENCE_SECONDS / speed, rel=0.05)
    done = events[-1][0]
    assert isinstance(done, Done)
    assert done.usage.completion_tokens == pytest.approx(seconds * 1000, rel=0.02)


def test_tempo_factors() -> None:
    from mlx_gateway.workers.tts.tempo import factors

    assert factors(1.5) == [1.5]
    assert factors(4.0) == [2.0, 2.0]
    assert factors(0.25) == [0.5, 0.5]
    assert factors(3.0) == [2.0, 1.5]


def test_the_audio_is_what_the_model_says(tts) -> None:
    """The pcm bytes are the model's samples, resampled to 24 kHz: not silence."""
    backend, replies = tts
    backend.submit(Synthesize(request_id="loud", input=ONE, response_format="wav"), [])
    run(backend)
    with av.open(io.BytesIO(audio_of(of(replies, "loud")))) as container:
        samples = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])
    assert np.abs(samples).max() > 100  # int16 samples of a random model's noise


def test_unknown_voice_is_refused_before_any_work(tts) -> None:
    backend, replies = tts
    with pytest.raises(RequestError) as caught:
        backend.submit(Synthesize(request_id="v", input=ONE, voice="nobody"), [])
    assert caught.value.param == "voice" and caught.value.status == 400
    assert "default, alloy, echo" in caught.value.message
    assert not backend.has_work() and of(replies, "v") == []
    backend.submit(Synthesize(request_id="alias", input=ONE, voice="alloy"), [])
    run(backend)
    assert isinstance(of(replies, "alias")[-1][0], Done)


def test_bad_requests_are_refused(tts) -> None:
    backend, _ = tts
    with pytest.raises(RequestError, match="no text"):
        backend.submit(Synthesize(request_id="e", input=" \n "), [])
    with pytest.raises(RequestError, match="response_format"):
        backend.submit(Synthesize(request_id="f", input=ONE, response_format="ogg"), [])
    with pytest.raises(RequestError, match="speed"):
        backend.submit(Synthesize(request_id="s", input=ONE, speed=5.0), [])
    with pytest.raises(RequestError, match="speech synthesis"):
        backend.submit(Transcribe(request_id="t"), [b"x"])
    assert not backend.has_work()


def test_cancel_stops_between_sentences(tts) -> None:
    backend, replies = tts
    text = " ".join(f"Sentence number {i} is here." for i in range(20))
    backend.submit(Synthesize(request_id="c", input=text, response_format="mp3"), [])
    backend.step()
    backend.step()
    backend.cancel("c")
    assert not backend.has_work()
    events = of(replies, "c")
    done = events[-1][0]
    assert isinstance(done, Done) and done.finish_reason == "cancelled"
    chunks = [r for r, _ in events if isinstance(r, SpeechChunk)]
    assert 1 <= len(chunks) < 20
    backend.cancel("c")  # again: ignored
    assert of(replies, "c")[-1][0] is done


def test_requests_take_turns(tts) -> None:
    backend, replies = tts
    backend.submit(Synthesize(request_id="a", input=THREE, response_format="pcm"), [])
    backend.submit(Synthesize(request_id="b", input=THREE, response_format="pcm"), [])
    run(backend)
    order = [
        r.request_id for r, _ in replies if isinstance(r, SpeechChunk) and r.request_id in "ab"
    ]
    assert order[:4] == ["a", "b", "a", "b"]


def test_a_failing_generate_ends_only_its_request(tiny_soprano_path: Path) -> None:
    backend, replies = make_backend(tiny_soprano_path, generate_kwargs={"temperature": "hot"})
    backend.submit(Synthesize(request_id="bad", input=ONE), [])
    with pytest.raises(Exception):  # noqa: B017 (whatever the model raises)
        backend.step()
    backend.fail_active("generation failed: boom")
    # As the serve loop does after a failed step: the failure happened while MLX
    # traced the compiled sampler, which leaves its random state broken.
    repair_random_state()
    assert not backend.has_work()
    error = of(replies, "bad")[-1][0]
    assert isinstance(error, Error) and error.status == 500


def test_the_default_voice_of_a_model_without_voices(tiny_soprano_path: Path) -> None:
    # Soprano has no voice list: any default is its own voice. A model with voices
    # refuses a default outside them (see test_voices_of_a_voice_pack_model).
    backend, _ = make_backend(tiny_soprano_path, voice="default")
    assert backend.voices is not None and backend.voices.resolve(None) == "default"


def test_voices_of_a_voice_pack_model(tmp_path: Path) -> None:
    from mlx_gateway.workers.tts.voices import Voices, model_voices

    (tmp_path / "voices").mkdir()
    for name in ("af_heart", "bm_george"):
        (tmp_path / "voices" / f"{name}.safetensors").write_bytes(b"")
    own = model_voices(object(), tmp_path)
    assert own == ["af_heart", "bm_george"]
    voices = Voices(own, {"alloy": None, "onyx": "bm_george"}, "af_heart", "kokoro")
    assert voices.resolve("alloy") == "af_heart"
    assert voices.resolve("onyx") == "bm_george"
    assert voices.resolve(None) == "af_heart"
    assert voices.resolve("bm_george") == "bm_george"
    with pytest.raises(ValueError, match="not one of the model's voices"):
        Voices(own, {}, "nobody", "kokoro")
    with pytest.raises(RequestError):
        voices.resolve("af_nobody")


def test_voices_a_model_loads_or_names() -> None:
    from mlx_gateway.workers.tts.voices import model_voices

    class Kitten:  # loads a table of voices (voices.npz)
        voices = {"expr-voice-2-f": None, "expr-voice-5-m": None}

    class Qwen3:  # names its speakers
        def get_supported_speakers(self) -> list[str]:
            return ["vivian", "ryan"]

    nowhere = Path("/nonexistent")
    assert model_voices(Kitten(), nowhere) == ["expr-voice-2-f", "expr-voice-5-m"]
    assert model_voices(Qwen3(), nowhere) == ["ryan", "vivian"]


def test_split_text() -> None:
    assert split_text("One. Two!  Three?\n\nFour") == ["One.", "Two!", "Three?", "Four"]
    assert split_text("e.g. this") == ["e.g.", "this"]
    long = "word " * 200
    pieces = split_text(long, limit=100)
    assert all(len(p) <= 100 for p in pieces)
    assert " ".join(pieces).split() == long.split()
    assert split_text("a, " * 60, limit=50)[0].endswith(",")
    assert split_text("   ") == []
