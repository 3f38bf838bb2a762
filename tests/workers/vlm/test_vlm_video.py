"""Video parts in the vlm worker: PyAV decoding and frame sampling on their own,
then the backend in-process on the tiny random Qwen2-VL (frames as a video for its
processor, or as ordered images), bad videos refused with the backend still
serving."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from mlx_gateway.protocol.messages import Error, Generate, SamplingParams, Started
from mlx_gateway.workers.runtime.contract import RequestError
from mlx_gateway.workers.vlm.video import VideoLimits, decode_video
from tests.fixtures.tiny_video import make_video

from .test_vlm_backend import Run


def frames_of(video: bytes, **limits: float) -> int:
    return len(decode_video(video, where="v", limits=VideoLimits(**limits)).frames)  # type: ignore[arg-type]


def test_frames_are_sampled_evenly_up_to_max_frames() -> None:
    clip = make_video(8, fps=4)  # 2 seconds
    assert frames_of(clip, fps=2.0) == 4
    assert frames_of(clip, fps=4.0) == 8
    assert frames_of(clip, fps=4.0, max_frames=3) == 3  # spread over the whole clip
    assert frames_of(make_video(1)) == 1
    video = decode_video(clip, where="v", limits=VideoLimits(fps=1.0))
    assert video.frames[0].shape == (56, 56, 3)
    assert video.channels_first().shape == (2, 3, 56, 56)
    assert video.duration == pytest.approx(2.0)
    first, second = video.frames
    assert first[28, 28, 0] > 200 > first[28, 28, 1]  # red, then blue (frame 4 of 8)
    assert second[28, 28, 2] > 200 > second[28, 28, 0]


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"", "the file is empty"),
        (b"this is not a video at all", "Invalid data"),
        (make_video(4)[:120], "could not be decoded"),
    ],
)
def test_what_is_no_video_is_a_400_saying_why(data: bytes, words: str) -> None:
    with pytest.raises(RequestError) as caught:
        decode_video(data, where="messages[0].content[0]", limits=VideoLimits())
    error = caught.value.to_error("r")
    assert (error.status, error.code) == (400, "invalid_video")
    assert "The video in messages[0].content[0] could not be decoded" in error.message
    assert words in error.message


def test_a_still_image_is_not_a_video() -> None:
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, "PNG")
    with pytest.raises(RequestError, match=r"still image .* image_url part"):
        decode_video(buffer.getvalue(), where="v", limits=VideoLimits())


def test_a_video_over_max_seconds_is_refused() -> None:
    with pytest.raises(RequestError) as caught:
        decode_video(make_video(12, fps=4), where="v", limits=VideoLimits(max_seconds=2))
    error = caught.value.to_error("r")
    assert (error.status, error.code) == (400, "video_too_long")
    assert "lasts 3.0 s" in error.message and "max_video_seconds (2 s)" in error.message


# ---------------------------------------------------------------- the backend


@pytest.fixture(scope="module")
def run(tiny_vlm_path: Path) -> Iterator[Run]:
    loaded = Run(tiny_vlm_path, options={"video_fps": 4.0, "max_frames": 8})
    yield loaded
    loaded.backend.close()


def ask(request_id: str, videos: int = 1) -> Generate:
    parts = [{"type": "video", "payload": k} for k in range(videos)]
    parts.append({"type": "text", "text": "describe this image"})
    return Generate(
        request_id=request_id,
        messages=[{"role": "user", "content": parts}],
        sampling=SamplingParams(temperature=0.0, max_tokens=4),
    )


def prompt_tokens(run: Run, request_id: str, files: list[bytes], videos: int = 1) -> int:
    run.submit(ask(request_id, videos), files)
    run.drain()
    return run.started(request_id).prompt_tokens


@pytest.mark.slow
def test_prompt_tokens_grow_with_the_frames(run: Run) -> None:
    assert run.backend.prompts.native_video  # Qwen2-VL's processor takes videos
    two, four, eight = (prompt_tokens(run, f"f{n}", [make_video(n)]) for n in (2, 4, 8))
    # 56x56 frames: 4 tokens per two frames (one temporal patch).
    assert (four - two, eight - four) == (4, 8)
    assert run.done("f8").usage.prompt_tokens == eight
    text = prompt_tokens(run, "text", [], videos=0)
    assert two - text == 4 + 2  # with <|vision_start|> and <|vision_end|>
    twice = prompt_tokens(run, "twice", [make_video(2), make_video(2)], videos=2)
    assert twice - text == 2 * (two - text)


@pytest.mark.slow
def test_frames_as_ordered_images_without_a_video_processor(run: Run) -> None:
    prompts = run.backend.prompts
    prompts.native_video = False
    try:
        two, four = (prompt_tokens(run, f"i{n}", [make_video(n)]) for n in (2, 4))
    finally:
        prompts.native_video = True
    # Each frame an image: 4 tokens between <|vision_start|> and <|vision_end|>.
    assert four - two == 2 * (4 + 2)


@pytest.mark.slow
def test_a_bad_video_is_a_400_and_the_backend_serves_on(run: Run) -> None:
    run.submit(ask("bad"), [b"\x00\x01 not a video"])
    run.drain()
    error = run.error("bad")
    assert isinstance(error, Error) and (error.status, error.code) == (400, "invalid_video")
    assert "could not be decoded" in error.message
    assert error.param == "messages[0].content[0].video_url"
    run.submit(ask("after"), [make_video(2)])
    run.drain()
    assert isinstance(run.events("after")[0], Started)


@pytest.mark.slow
def test_the_vision_tower_sees_the_frames(run: Run) -> None:
    import mlx.core as mx

    backend = run.backend

    def embedded(clip: bytes) -> mx.array:
        with mx.stream(backend._stream):  # type: ignore[arg-type]
            return backend.prompts.prompt(ask("e"), [clip]).kwargs["inputs_embeds"]

    red_green = embedded(make_video(2))
    assert mx.array_equal(red_green, embedded(make_video(2))).item()  # deterministic
    blue_yellow = embedded(make_video(2, first=2))
    assert blue_yellow.shape == red_green.shape
    assert not mx.allclose(blue_yellow, red_green).item()  # other colours, other input


def test_a_clip_without_a_known_duration_is_thinned_as_it_is_read() -> None:
    clip = make_video(40, fps=4, container="m4v")  # a raw MPEG-4 stream: no duration
    video = decode_video(clip, where="v", limits=VideoLimits(fps=4.0, max_frames=5))
    assert len(video.frames) == 5  # at most 2 x 5 were held at a time
    assert video.duration > 0
    with pytest.raises(RequestError, match="max_video_seconds"):  # found while reading
        decode_video(clip, where="v", limits=VideoLimits(max_seconds=2))


def test_a_long_clip_is_sampled_by_seeking_as_if_read_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mlx_gateway.workers.vlm import video as module

    # 10 s at 23 frames a second; the wanted frames (0, 57.5, 115, 172.5) fall between
    # key frames, and their colours (6 in turn) differ from the key frames' ones.
    clip = make_video(230, fps=23)
    limits = VideoLimits(fps=0.4, max_frames=16)
    seeking = decode_video(clip, where="v", limits=limits)
    monkeypatch.setattr(module, "SEEK_RATIO", 10_000)  # the other path: every frame read
    read_whole = decode_video(clip, where="v", limits=limits)
    assert len(seeking.frames) == len(read_whole.frames) == 4
    for a, b in zip(seeking.frames, read_whole.frames, strict=True):
        assert (a == b).all()
    colours = [tuple(int(c) for c in frame[28, 28]) for frame in seeking.frames]
    assert len(set(colours)) == 4  # key frames (every 12th) would all be red
    assert seeking.duration == read_whole.duration
