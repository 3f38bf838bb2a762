"""The image backend in-process (no sockets) on the tiny random FLUX.2 klein: the
reply sequence, seeds, request checks, cancelling inside the diffusion loop, and
an edit. Pictures are 16x16 and take 2 steps: the fixed 84M VAE decode is most of
each picture's time."""

from __future__ import annotations

import io
import queue
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from PIL import Image as PILImage

from mlx_gateway.protocol.messages import (
    Cancel,
    Done,
    Error,
    Generate,
    GenerateImage,
    Image,
    ImageStep,
    Reply,
    Started,
)
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.image.backend import ImageBackend
from mlx_gateway.workers.runtime.contract import InboxItem, RequestError
from tests.fixtures.tiny_flux2 import CONFIG_NAME, MODEL_CONFIG

pytestmark = pytest.mark.slow

Sent = tuple[Reply, list[bytes]]


class Recorder:
    """Collects what the backend emits, binary payloads included."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []

    def __call__(self, msg: Reply, payloads: Sequence[bytes] = ()) -> None:
        self.sent.append((msg, [bytes(p) for p in payloads]))

    def of(self, request_id: str) -> list[Sent]:
        return [(m, p) for m, p in self.sent if getattr(m, "request_id", None) == request_id]


def make_backend(model: Path, mode: str = "generate") -> tuple[ImageBackend, Recorder]:
    recorder = Recorder()
    options = {"config_name": CONFIG_NAME, "model_config": MODEL_CONFIG, "steps": 2, "mode": mode}
    spec = WorkerSpec(
        worker_id="w", kind="image", model_path=str(model), served_model_name="t", options=options
    )
    backend = ImageBackend()
    backend.load(spec, recorder)
    return backend, recorder


def run(backend: ImageBackend) -> None:
    while backend.has_work():
        backend.step()


def png(payload: bytes) -> PILImage.Image:
    picture = PILImage.open(io.BytesIO(payload))
    assert picture.format == "PNG"
    return picture


def upload(size: tuple[int, int], mode: str = "RGB") -> bytes:
    buffer = io.BytesIO()
    PILImage.new(mode, size, (200, 40, 40, 255)[: len(mode)]).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def generator(tiny_flux2_path: Path) -> tuple[ImageBackend, Recorder]:
    backend, recorder = make_backend(tiny_flux2_path)
    backend.watch_inbox(queue.Queue())
    return backend, recorder


def test_load_reports_the_preset(generator: tuple[ImageBackend, Recorder]) -> None:
    backend, _ = generator
    assert backend.preset is not None and backend.preset.key == "flux2-klein-4b"
    assert type(backend.model).__name__ == "Flux2Klein"
    # The overrides went to a copy: mflux's shared preset keeps the real geometry.
    from mflux.models.common.config.model_config import AVAILABLE_MODELS

    assert AVAILABLE_MODELS["flux2-klein-4b"].transformer_overrides["num_layers"] == 5
    assert backend.model.model_config.transformer_overrides["num_layers"] == 1


def test_pictures_seeds_and_sequence(generator: tuple[ImageBackend, Recorder]) -> None:
    backend, recorder = generator
    backend.submit(
        GenerateImage(request_id="two", prompt="a red cat", n=2, width=16, height=16, seed=7), []
    )
    run(backend)
    sent = recorder.of("two")
    kinds = [type(m).__name__ for m, _ in sent]
    assert kinds == ["Started", *(["ImageStep"] * 2 + ["Image"]) * 2, "Done"]
    steps = [(m.index, m.step, m.steps) for m, _ in sent if isinstance(m, ImageStep)]
    assert steps == [(0, 1, 2), (0, 2, 2), (1, 1, 2), (1, 2, 2)]
    images = [(m, p) for m, p in sent if isinstance(m, Image)]
    assert [(m.index, m.seed, m.width, m.height, m.partial) for m, _ in images] == [
        (0, 7, 16, 16, None),
        (1, 8, 16, 16, None),
    ]
    first, second = (png(p[0]) for _, p in images)
    assert first.size == second.size == (16, 16)
    assert first.mode == "RGB"
    assert first.tobytes() != second.tobytes()  # n: 2 gives two different pictures
    done = sent[-1][0]
    assert isinstance(done, Done) and done.finish_reason == "stop"

    # The same seed makes the same picture: seed 8 alone is the second one above.
    backend.submit(
        GenerateImage(request_id="again", prompt="a red cat", width=16, height=16, seed=8), []
    )
    run(backend)
    (again,) = [p[0] for m, p in recorder.of("again") if isinstance(m, Image)]
    assert png(again).tobytes() == second.tobytes()


@pytest.mark.parametrize(
    ("fields", "payloads", "param"),
    [
        ({"width": 24, "height": 16}, [], "size"),
        ({"width": 8, "height": 8}, [], "size"),
        ({"width": 4096, "height": 4096}, [], "size"),
        ({"n": 0}, [], "n"),
        ({"n": 11}, [], "n"),
        ({"steps": 0}, [], "steps"),
        ({"prompt": "  "}, [], "prompt"),
        ({"negative_prompt": "dogs"}, [], "negative_prompt"),
        ({"output_format": "bmp"}, [], "output_format"),
        ({"partial_images": 4}, [], "partial_images"),
        ({"images": 1}, [b"not an image"], "image"),
    ],
)
def test_bad_requests_are_rejected_before_started(
    generator: tuple[ImageBackend, Recorder],
    fields: dict[str, Any],
    payloads: list[bytes],
    param: str,
) -> None:
    backend, _ = generator
    msg = GenerateImage(**{"request_id": "bad", "prompt": "a cat", **fields})
    with pytest.raises(RequestError) as info:
        backend.submit(msg, payloads)
    assert info.value.status == 400
    assert info.value.param == param
    assert not backend.has_work()


def test_size_error_suggests_a_valid_size(generator: tuple[ImageBackend, Recorder]) -> None:
    backend, _ = generator
    with pytest.raises(RequestError, match=r"multiples of 16 \(e\.g\. 96x32\)"):
        backend.submit(GenerateImage(request_id="odd", prompt="a cat", width=100, height=40), [])


def test_other_requests_are_refused(generator: tuple[ImageBackend, Recorder]) -> None:
    backend, _ = generator
    with pytest.raises(RequestError, match="does not serve 'Generate'"):
        backend.submit(Generate(request_id="chat", prompt="hi"), [])


def test_cancel_stops_the_diffusion_loop(generator: tuple[ImageBackend, Recorder]) -> None:
    backend, recorder = generator
    inbox: queue.Queue[InboxItem] = queue.Queue()
    backend.watch_inbox(inbox)
    try:
        msg = GenerateImage(request_id="stop", prompt="a cat", width=16, height=16, steps=6)
        backend.submit(msg, [])
        inbox.put((Cancel(request_id="other"), []))  # someone else's cancel: no effect
        inbox.put((Cancel(request_id="stop"), []))
        backend.step()
    finally:
        backend.watch_inbox(queue.Queue())
    sent = [m for m, _ in recorder.of("stop")]
    assert [type(m) for m in sent] == [Started, ImageStep, Done]
    assert isinstance(sent[-1], Done) and sent[-1].finish_reason == "cancelled"
    assert not backend.has_work()
    assert inbox.qsize() == 2  # peeked, left for the serve loop
    backend.cancel("stop")  # what the serve loop then does: a no-op
    assert [type(m) for m, _ in recorder.of("stop")][-1] is Done


def test_cancel_of_a_queued_request(generator: tuple[ImageBackend, Recorder]) -> None:
    backend, recorder = generator
    backend.submit(GenerateImage(request_id="q1", prompt="a cat", width=16, height=16), [])
    backend.submit(GenerateImage(request_id="q2", prompt="a cat", width=16, height=16), [])
    assert backend.counts() == (1, 1)
    backend.cancel_all()
    assert backend.counts() == (0, 0)
    for rid in ("q1", "q2"):
        last = recorder.of(rid)[-1][0]
        assert isinstance(last, Done) and last.finish_reason == "cancelled"


def test_a_failed_step_fails_only_its_request(generator: tuple[ImageBackend, Recorder]) -> None:
    backend, recorder = generator
    backend.submit(GenerateImage(request_id="f1", prompt="a cat", width=16, height=16), [])
    backend.submit(GenerateImage(request_id="f2", prompt="a cat", width=16, height=16), [])
    backend.fail_active("generation failed: boom")
    error = recorder.of("f1")[-1][0]
    assert isinstance(error, Error) and error.status == 500
    assert backend.counts() == (1, 0)
    backend.cancel_all()


def test_edit_follows_the_input_size_and_checks_the_mask(tiny_flux2_path: Path) -> None:
    backend, recorder = make_backend(tiny_flux2_path, mode="edit")
    try:
        assert type(backend.model).__name__ == "Flux2KleinEdit"
        with pytest.raises(RequestError) as info:  # FLUX.2 edits take no mask
            backend.submit(
                GenerateImage(request_id="m", prompt="x", images=1, mask=True),
                [upload((24, 20)), upload((24, 20), "RGBA")],
            )
        assert info.value.param == "mask"
        with pytest.raises(RequestError) as info:
            backend.submit(GenerateImage(request_id="none", prompt="x"), [])
        assert info.value.param == "image"
        with pytest.raises(RequestError) as info:  # smaller than 16 pixels a side
            backend.submit(GenerateImage(request_id="tiny", prompt="x", images=1), [upload((8, 8))])
        assert info.value.param == "image"

        # No size: the input's, snapped down to multiples of 16 (24x40 → 16x32).
        backend.submit(
            GenerateImage(request_id="edit", prompt="make it blue", images=1, seed=3),
            [upload((24, 40), "RGBA")],
        )
        run(backend)
        sent = recorder.of("edit")
        (picture,) = [(m, p[0]) for m, p in sent if isinstance(m, Image)]
        assert (picture[0].width, picture[0].height, picture[0].seed) == (16, 32, 3)
        assert png(picture[1]).size == (16, 32)
        assert isinstance(sent[-1][0], Done) and sent[-1][0].finish_reason == "stop"
        # Uploads live as files only while their request does, rejected ones never.
        assert list(backend.scratch_dir.iterdir()) == []
    finally:
        backend.close()
    assert not backend.scratch_dir.exists()
