from __future__ import annotations

import msgspec
import pytest

from mlx_gateway.protocol import codec, frames
from mlx_gateway.protocol.messages import (
    Batch,
    Cancel,
    Chunk,
    Done,
    Embed,
    Embeddings,
    Error,
    Generate,
    GenerateImage,
    Heartbeat,
    Image,
    ImageStep,
    Memory,
    ModelFacts,
    Ping,
    Progress,
    Ready,
    SamplingParams,
    Shutdown,
    Started,
    StepProgress,
    Transcribe,
    Transcript,
    Usage,
)
from mlx_gateway.protocol.spec import WorkerSpec, decode_spec, encode_spec

REQUESTS = [
    Generate(
        request_id="r1",
        messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        sampling=SamplingParams(max_tokens=5, temperature=0.0, stop=["\n", "END"], seed=7),
        chat_template_kwargs={"enable_thinking": False},
    ),
    Generate(request_id="r2", prompt=[1, 2, 3]),
    Generate(request_id="r3", prompt="once upon"),
    Embed(request_id="e1", texts=["a", "b"], dimensions=8),
    Embed(request_id="e2", token_ids=[[1, 2], [3]], truncate=True),
    Transcribe(request_id="t1", filename="a.wav", language="en", word_timestamps=True),
    GenerateImage(request_id="i1", prompt="a cat", n=2, width=512, height=256, seed=7),
    GenerateImage(request_id="i2", prompt="bluer", images=1, mask=True, output_format="webp"),
    Cancel(request_id="r1"),
    Shutdown(grace=2.5),
    Ping(),
]
REPLIES = [
    Ready(pid=42, facts=ModelFacts(context_length=4096, model_type="llama"), memory=Memory(rss=9)),
    Progress(stage="download", fraction=0.5, detail="3/6 files"),
    Heartbeat(inflight=2, queued=1, memory=Memory(rss=1, mlx_active=2, mlx_cache=3)),
    Heartbeat(
        inflight=1,
        step=StepProgress(steps=7, current="decode of 1 request", stalled_for=3.5, longest=0.2),
    ),
    Started(request_id="r1", prompt_tokens=12, cached_tokens=4),
    Chunk(request_id="r1", text="héllo ✓", tokens=2),
    Batch(chunks=[Chunk(request_id="a", text="x", tokens=1), Chunk(request_id="b", text="")]),
    Embeddings(request_id="e1", rows=2, dims=8, prompt_tokens=5),
    Transcript(request_id="t1", text="hi", language="en", duration=1.5, segments=[{"id": 0}]),
    ImageStep(request_id="i1", index=1, step=3, steps=4),
    Image(request_id="i1", index=1, width=512, height=256, seed=8),
    Image(request_id="i1", index=0, width=512, height=256, seed=7, partial=0),
    Done(request_id="r1", finish_reason="length", usage=Usage(12, 5, 4)),
    Error(message="boom", request_id="r1", status=400, param="messages", code="too_long"),
    Error(message="download failed: offline", status=503),
]


@pytest.mark.parametrize("msg", REQUESTS, ids=lambda m: type(m).__name__)
def test_request_round_trip(msg: object) -> None:
    payloads = [b"\x00binary\xff", bytearray(b"second")]
    decoded, got = frames.unpack_request([bytes(f) for f in frames.pack(msg, payloads)])  # type: ignore[arg-type]
    assert decoded == msg
    assert got == [b"\x00binary\xff", b"second"]


@pytest.mark.parametrize("msg", REPLIES, ids=lambda m: type(m).__name__)
def test_reply_round_trip_through_router_framing(msg: object) -> None:
    wire = [b"model/a#1", *frames.pack(msg)]  # type: ignore[arg-type]
    worker_id, decoded, payloads = frames.unpack_reply(wire)  # type: ignore[arg-type]
    assert (worker_id, decoded, payloads) == ("model/a#1", msg, [])


def test_header_is_tagged_msgpack_and_payloads_stay_outside() -> None:
    blob = b"\x01" * 10_000
    wire = frames.pack_to(b"w", Cancel(request_id="r"), [blob])
    assert wire[0] == b"w" and wire[2] is blob
    assert msgspec.msgpack.decode(wire[1]) == {"op": "cancel", "request_id": "r"}


def test_a_request_is_not_a_reply() -> None:
    with pytest.raises(msgspec.ValidationError):
        codec.decode_reply(codec.encode(Ping()))
    with pytest.raises(msgspec.ValidationError):
        codec.decode_request(codec.encode(Ready(pid=1)))


def test_garbage_and_short_frames_raise() -> None:
    with pytest.raises(msgspec.DecodeError):
        codec.decode_request(b"\xc1not msgpack")
    with pytest.raises(ValueError):
        frames.unpack_reply([b"only-identity"])
    with pytest.raises(ValueError):
        frames.unpack_request([])


def test_spec_round_trip() -> None:
    spec = WorkerSpec(
        worker_id="m#1", kind="lm", model_path="/x", served_model_name="m", options={"a": 1}
    )
    assert decode_spec(encode_spec(spec)) == spec
