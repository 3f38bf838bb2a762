"""The whisper backend in-process (no sockets) on the tiny random Whisper: the reply
sequence, request checks, bad audio, cancels and turn-taking."""

from __future__ import annotations

import io
from pathlib import Path

import av
import numpy as np
import pytest

from mlx_gateway.protocol.messages import (
    Chunk,
    Done,
    Error,
    Generate,
    Reply,
    Started,
    Transcribe,
    Transcript,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.runtime.contract import LoadError, RequestError
from mlx_gateway.workers.whisper.backend import WhisperBackend
from tests.fixtures.whisper import FOX_CLIPS

pytestmark = pytest.mark.slow


def wav_bytes(seconds: float, rate: int = 16_000) -> bytes:
    """A 440 Hz tone as 16-bit WAV, encoded by PyAV."""
    samples = (0.3 * np.sin(2 * np.pi * 440 * np.arange(int(seconds * rate)) / rate)).astype(
        np.float32
    )
    buffer = io.BytesIO()
    with av.open(buffer, "w", format="wav") as out:
        stream = out.add_stream("pcm_s16le", rate=rate, layout="mono")
        frame = av.AudioFrame.from_ndarray(samples[None, :], format="flt", layout="mono")
        frame.sample_rate = rate
        resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
        for converted in resampler.resample(frame):
            out.mux(stream.encode(converted))
        out.mux(stream.encode(None))
    return buffer.getvalue()


def header_only() -> bytes:
    """A WAV file cut right after its headers: valid, but without one sample."""
    raw = wav_bytes(1)
    return raw[: raw.index(b"data") + 8]


def make_backend(model: Path, **spec_fields: object) -> tuple[WhisperBackend, list[Reply]]:
    replies: list[Reply] = []
    spec = WorkerSpec(
        worker_id="w",
        kind="whisper",
        model_path=str(model),
        served_model_name="tiny",
        **spec_fields,
    )  # type: ignore[arg-type]
    backend = WhisperBackend()
    backend.load(spec, replies.append)
    return backend, replies


@pytest.fixture(scope="module")
def whisper(tiny_whisper_path: Path) -> tuple[WhisperBackend, list[Reply]]:
    return make_backend(tiny_whisper_path, max_concurrency=2)


def run(backend: WhisperBackend, limit: int = 200) -> int:
    """Step until idle; returns the number of steps."""
    for steps in range(limit):
        if not backend.has_work():
            return steps
        backend.step()
    raise AssertionError("the backend never went idle")


def of(replies: list[Reply], request_id: str) -> list[Reply]:
    return [r for r in replies if getattr(r, "request_id", None) == request_id]


def transcribe(request_id: str, **fields: object) -> Transcribe:
    # A fixed temperature: one decode per window (0 retries up to six times).
    fields.setdefault("temperature", 0.5)
    return Transcribe(request_id=request_id, **fields)  # type: ignore[arg-type]


def test_reply_sequence_and_transcript(whisper) -> None:
    backend, replies = whisper
    backend.submit(transcribe("a", word_timestamps=True), [FOX_CLIPS[0].read_bytes()])
    assert of(replies, "a") == []  # nothing before the audio is decoded
    run(backend)
    events = of(replies, "a")
    assert isinstance(events[0], Started)
    assert isinstance(events[-2], Transcript) and isinstance(events[-1], Done)
    assert all(isinstance(e, Chunk) for e in events[1:-2])
    transcript, done = events[-2], events[-1]
    assert done.finish_reason == "stop"
    assert transcript.language == "english"
    assert 2.7 < transcript.duration < 2.9  # the clip is 2.78 s
    assert "".join(e.text for e in events[1:-2]) == "".join(s["text"] for s in transcript.segments)
    assert done.usage.completion_tokens == sum(
        sum(1 for t in s["tokens"] if t < 50257) for s in transcript.segments
    )
    for segment in transcript.segments:
        assert set(segment) >= {"id", "seek", "start", "end", "text", "tokens", "avg_logprob"}
        assert "words" in segment
        for word in segment["words"]:
            assert 0 <= word["start"] <= word["end"]
            assert all(np.isfinite(v) for v in (word["start"], word["end"], word["probability"]))
    assert backend.counts() == (0, 0)


def test_long_audio_takes_several_steps(whisper) -> None:
    backend, replies = whisper
    backend.submit(transcribe("long"), [wav_bytes(65)])
    steps = run(backend)
    # Two decode steps (60 s each) and at least three 30 s windows.
    assert steps >= 5
    transcript = next(r for r in of(replies, "long") if isinstance(r, Transcript))
    assert transcript.duration == pytest.approx(65, abs=0.01)
    seeks = [segment["seek"] for segment in transcript.segments]
    assert seeks == sorted(seeks)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"this is not audio at all" * 10, "not audio FFmpeg can read"),
        (header_only(), "no audio samples"),
    ],
)
def test_undecodable_audio_is_a_400_before_started(whisper, payload: bytes, reason: str) -> None:
    backend, replies = whisper
    backend.submit(transcribe("bad"), [payload])
    run(backend)
    (error,) = of(replies, "bad")
    replies.clear()
    assert isinstance(error, Error)
    assert (error.status, error.param) == (400, "file")
    assert reason in error.message


@pytest.mark.parametrize(
    ("msg", "payloads", "param"),
    [
        (transcribe("x"), [], "file"),
        (transcribe("x"), [b""], "file"),
        (transcribe("x", language="de"), [b"x"], "language"),
        (transcribe("x", temperature=1.5), [b"x"], "temperature"),
        (transcribe("x", task="summarize"), [b"x"], "task"),
        (Generate(request_id="x", prompt="hi"), [], None),
    ],
)
def test_bad_requests_are_refused_at_submit(whisper, msg, payloads, param) -> None:
    backend, _ = whisper
    with pytest.raises(RequestError) as err:
        backend.submit(msg, payloads)
    assert err.value.status == 400
    assert err.value.param == param
    assert not backend.has_work()


def test_english_names_and_codes_are_accepted(whisper) -> None:
    backend, replies = whisper
    for request_id, language in (("en", "en"), ("name", "English")):
        backend.submit(transcribe(request_id, language=language), [FOX_CLIPS[1].read_bytes()])
    run(backend)
    for request_id in ("en", "name"):
        assert isinstance(of(replies, request_id)[-1], Done)


def test_cancel_while_decoding_and_while_transcribing(whisper) -> None:
    backend, replies = whisper
    backend.submit(transcribe("early"), [wav_bytes(90)])
    backend.step()  # the first 60 s are decoded, 30 s are left
    backend.cancel("early")
    assert of(replies, "early") == [Done(request_id="early", finish_reason="cancelled")]
    backend.submit(transcribe("late"), [wav_bytes(65)])
    while not any(isinstance(r, Started) for r in of(replies, "late")):
        backend.step()
    backend.step()  # one window
    backend.cancel("late")
    assert isinstance(of(replies, "late")[-1], Done)
    assert of(replies, "late")[-1].finish_reason == "cancelled"
    assert not backend.has_work()
    backend.cancel("late")  # unknown and finished ids are ignored


def test_concurrent_requests_take_turns(whisper) -> None:
    backend, replies = whisper
    replies.clear()
    backend.submit(transcribe("one"), [wav_bytes(65)])
    backend.submit(transcribe("two"), [wav_bytes(65)])
    backend.submit(transcribe("three"), [wav_bytes(2)])  # waits: max_concurrency is 2
    assert backend.counts() == (0, 3)
    backend.step()
    assert backend.counts() == (2, 1)
    run(backend)
    order = [r.request_id for r in replies if isinstance(r, Started | Done)]
    # Both long requests started before either finished; the third came after one ended.
    assert order.index("two") < order.index("one", order.index("one") + 1)
    assert order.index("three") > min(
        order.index("one", order.index("one") + 1), order.index("two", order.index("two") + 1)
    )


def test_a_failing_step_fails_only_its_request(whisper, monkeypatch) -> None:
    backend, replies = whisper
    backend.submit(transcribe("boom"), [wav_bytes(2)])
    backend.step()  # decoded, Started
    from mlx_gateway.workers.whisper import transcriber

    def explode(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("window failed")

    monkeypatch.setattr(transcriber.Transcriber, "step", explode)
    with pytest.raises(RuntimeError):
        backend.step()
    backend.fail_active("generation failed: RuntimeError: window failed")
    error = of(replies, "boom")[-1]
    assert isinstance(error, Error) and error.status == 500
    assert not backend.has_work()


def test_load_errors_name_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(LoadError, match=r"no config\.json"):
        make_backend(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(LoadError, match=r"weights\.safetensors"):
        make_backend(tmp_path)


def test_older_npz_weights_load(tiny_whisper_path: Path, tmp_path: Path) -> None:
    import mlx.core as mx

    (tmp_path / "config.json").write_text((tiny_whisper_path / "config.json").read_text())
    mx.savez(
        str(tmp_path / "weights.npz"), **mx.load(str(tiny_whisper_path / "weights.safetensors"))
    )
    backend, replies = make_backend(tmp_path)
    backend.submit(transcribe("npz"), [FOX_CLIPS[1].read_bytes()])
    run(backend)
    assert isinstance(of(replies, "npz")[-1], Done)
