"""Image embeddings in process: a tiny random SigLIP (mlx-embeddings' own classes)
loaded from a hub-snapshot-like folder, its text and image vectors against the
library's own ``generate`` on the same inputs, mixed batches, and the refusals."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from mlx_embeddings import generate
from mlx_embeddings import load as library_load
from PIL import Image

from mlx_gateway.protocol.messages import Done, Embed, Embeddings, Error, Started
from mlx_gateway.workers.embeddings.backend import EmbeddingsBackend
from mlx_gateway.workers.runtime.contract import RequestError
from tests.workers.embeddings.test_embeddings_backend import Recorder, make_backend, run

pytestmark = pytest.mark.slow

TEXTS = ["a photo of a cat", "hello world", "a photo of a dog"]


def png(color: tuple[int, int, int], size: tuple[int, int] = (80, 50)) -> bytes:
    """A PNG file of one colour with a darker square, so the picture has some shape."""
    image = Image.new("RGB", size, color)
    image.paste((color[0] // 3, color[1] // 3, color[2] // 3), (5, 5, 30, 30))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


IMAGES = [png((200, 30, 40)), png((20, 160, 60), (40, 90)), png((240, 240, 240))]


@pytest.fixture(scope="module")
def siglip(tiny_siglip_path: Path) -> tuple[EmbeddingsBackend, Recorder]:
    return make_backend(tiny_siglip_path)


@pytest.fixture(scope="module")
def library(tiny_siglip_path: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """The library's own model and processor, loaded through a link named as it wants."""
    link = tmp_path_factory.mktemp("named") / "tiny-siglip-patch16-64"
    link.symlink_to(tiny_siglip_path, target_is_directory=True)
    return library_load(str(link))


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_a_snapshot_folder_loads_and_says_it_embeds_images(tiny_siglip_path: Path) -> None:
    with pytest.raises(AttributeError, match="group"):  # the library alone cannot
        library_load(str(tiny_siglip_path))
    backend, _ = make_backend(tiny_siglip_path)
    assert backend.dual is not None and backend.dual.image_tokens == 16
    assert backend.info is not None and backend.info.dims == 32


def test_text_and_image_vectors_equal_the_library(siglip: tuple, library: tuple) -> None:
    backend, out = siglip
    model, processor = library
    pictures = [Image.open(io.BytesIO(data)).convert("RGB") for data in IMAGES]
    expected = generate(model, processor, texts=TEXTS, images=pictures)
    backend.submit(Embed(request_id="t", texts=TEXTS), [])
    backend.submit(Embed(request_id="i", images=[0, 1, 2]), IMAGES)
    run(backend)
    text_rows, image_rows = out.matrices["t"], out.matrices["i"]
    assert cosines(text_rows, np.array(expected.text_embeds)).min() >= 0.999
    assert cosines(image_rows, np.array(expected.image_embeds)).min() >= 0.999
    np.testing.assert_allclose(np.linalg.norm(image_rows, axis=1), 1.0, atol=1e-5)
    started = next(r for r in out.of("i") if isinstance(r, Started))
    assert started.prompt_tokens == 3 * 16  # 16 patches per 64x64 image


def test_mixed_inputs_keep_their_order_and_match_alone(siglip: tuple) -> None:
    backend, out = siglip
    backend.submit(Embed(request_id="alone-t", texts=TEXTS[:2]), [])
    backend.submit(Embed(request_id="alone-i", images=[0]), IMAGES[:1])
    backend.submit(Embed(request_id="mixed", texts=TEXTS[:2], images=[1]), IMAGES[:1])
    run(backend)
    mixed = out.matrices["mixed"]
    assert mixed.shape == (3, 32)
    np.testing.assert_allclose(mixed[0], out.matrices["alone-t"][0], atol=1e-5)
    np.testing.assert_allclose(mixed[1], out.matrices["alone-i"][0], atol=1e-5)
    np.testing.assert_allclose(mixed[2], out.matrices["alone-t"][1], atol=1e-5)
    done = [r for r in out.of("mixed") if isinstance(r, Done)]
    assert done and done[0].finish_reason == "stop"
    assert isinstance(out.of("mixed")[1], Embeddings)


def test_a_file_that_is_no_image_is_a_400_naming_its_input(siglip: tuple) -> None:
    backend, out = siglip
    with pytest.raises(RequestError) as caught:
        backend.submit(Embed(request_id="bad", texts=["hello world"], images=[1]), [b"nope"])
    assert caught.value.param == "input[1]" and "cannot be decoded" in caught.value.message
    assert not backend.has_work()
    backend.submit(Embed(request_id="after", images=[0]), IMAGES[:1])
    run(backend)
    assert out.matrices["after"].shape == (1, 32)
    assert not any(isinstance(r, Error) for r in out.of("after"))


def test_a_text_only_model_refuses_an_image_naming_itself(tiny_bert_path: Path) -> None:
    backend, _ = make_backend(tiny_bert_path)
    assert backend.dual is None
    with pytest.raises(RequestError) as caught:
        backend.submit(Embed(request_id="r", texts=["hello"], images=[0]), IMAGES[:1])
    message = caught.value.message
    assert "'tiny'" in message and "embeds text only" in message
    assert caught.value.status == 400 and caught.value.param == "input[0]"


def test_a_text_error_names_its_place_among_the_images(siglip: tuple) -> None:
    backend, _ = siglip
    long_text = " ".join(["the quick brown fox jumps over the lazy dog"] * 4)
    with pytest.raises(RequestError) as caught:
        backend.submit(
            Embed(request_id="long", texts=["hello world", long_text], images=[0]), IMAGES[:1]
        )
    assert caught.value.param == "input[2]" and caught.value.code == "context_length_exceeded"
