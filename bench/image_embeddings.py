"""Image embeddings throughput: the gateway against mlx-embeddings in this process.

    uv run python -m bench.image_embeddings          # a few minutes on 2 cores
    uv run python -m bench.image_embeddings --rounds 5 --batch 16 --json out.json

The model is a random-weight SigLIP built with mlx-embeddings' own classes
(``tests/fixtures/tiny_siglip.py``), by default ViT-S-sized (width 384, 6 layers,
224-pixel images, patch 16: 196 patches), so nothing is downloaded; the images are
``--images`` seeded PNG files of 320x240 random shapes. Both sides start from the
PNG bytes:

* in process: each chunk of ``--batch`` files decoded with PIL, run through the
  model's image processor and ``model.get_image_features`` (what
  ``mlx_embeddings.generate(..., images=…)`` does for the images), L2-normalized,
  evaluated and copied to NumPy;
* through the gateway: ``mlx-gateway launch`` (the real command, one embeddings
  worker), the files sent as ``data:`` URLs in ``image_url`` items, requests of
  ``--batch`` images with ``--concurrency`` in flight, answered in base64 and
  decoded by the client.

Rounds are interleaved; the report gives medians and the ratio gateway /
in-process as the median of the per-round ratios (the target is at least 90 %),
and the largest difference between both sides' vectors. OpenBLAS is preloaded as
in :mod:`bench.embeddings`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .embeddings import timed
from .servers import PRELOADED, reexec_with_openblas

SERVED = "siglip"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.image_embeddings", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--images", type=int, default=128, help="images per run")
    parser.add_argument("--batch", type=int, default=16, help="images per request and chunk")
    parser.add_argument("--concurrency", type=int, default=2, help="requests in flight")
    parser.add_argument("--rounds", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--width", type=int, default=384, help="the towers' width")
    parser.add_argument("--layers", type=int, default=6, help="layers per tower")
    parser.add_argument("--image-size", type=int, default=224, help="the model's image side")
    parser.add_argument("--no-openblas", action="store_true", help="do not preload OpenBLAS")
    parser.add_argument("--workdir", type=Path, help="keep the model, config and logs here")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    return parser.parse_args(argv)


def pictures(n: int, seed: int = 0) -> list[bytes]:
    """``n`` PNG files of 320x240 with a few random rectangles each."""
    from PIL import Image, ImageDraw

    rng = random.Random(seed)
    files = []
    for _ in range(n):
        image = Image.new("RGB", (320, 240), tuple(rng.randrange(256) for _ in range(3)))
        draw = ImageDraw.Draw(image)
        for _ in range(6):
            x, y = rng.randrange(300), rng.randrange(220)
            box = (x, y, x + rng.randrange(10, 120), y + rng.randrange(10, 120))
            draw.rectangle(box, fill=tuple(rng.randrange(256) for _ in range(3)))
        out = io.BytesIO()
        image.save(out, format="PNG")
        files.append(out.getvalue())
    return files


class InProcess:
    """mlx-embeddings on the same model, in this process."""

    def __init__(self, model_dir: Path) -> None:
        from mlx_embeddings import load

        self.model, self.processor = load(str(model_dir))

    def embed(self, files: list[bytes], batch: int) -> np.ndarray:
        import mlx.core as mx
        from PIL import Image

        out = []
        for start in range(0, len(files), batch):
            chunk = [Image.open(io.BytesIO(f)).convert("RGB") for f in files[start : start + batch]]
            pixels = self.processor.image_processor(images=chunk, return_tensors="np")
            vectors = self.model.get_image_features(mx.array(pixels["pixel_values"]))
            vectors = vectors / mx.linalg.norm(vectors, axis=-1, keepdims=True)
            mx.eval(vectors)
            out.append(np.array(vectors, dtype=np.float32))
        return np.concatenate(out)


async def through_gateway(port: int, files: list[bytes], batch: int, concurrency: int) -> Any:
    """All ``files`` as ``image_url`` items in requests of ``batch``, ``concurrency`` in flight."""
    import httpx

    urls = ["data:image/png;base64," + base64.b64encode(f).decode() for f in files]
    chunks = [urls[i : i + batch] for i in range(0, len(urls), batch)]
    results: list[np.ndarray | None] = [None] * len(chunks)
    pending = iter(range(len(chunks)))
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}/v1", timeout=600) as client:

        async def worker() -> None:
            for index in pending:
                items = [{"type": "image_url", "image_url": {"url": u}} for u in chunks[index]]
                body = {"model": SERVED, "input": items, "encoding_format": "base64"}
                response = await client.post("/embeddings", json=body)
                response.raise_for_status()
                data = response.json()["data"]
                results[index] = np.stack(
                    [np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in data]
                )

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return np.concatenate([r for r in results if r is not None])


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if not args.no_openblas:
        reexec_with_openblas("bench.image_embeddings", argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    from tests.fixtures.tiny_siglip import PATCH_SIZE, build_tiny_siglip

    from .servers import launch_loaded

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-image-embeddings-"))
    workdir.mkdir(parents=True, exist_ok=True)
    # Named as mlx-embeddings' own loader wants it (the baseline's ``load``).
    model_dir = workdir / f"siglip-patch{PATCH_SIZE}-{args.image_size}"
    if not (model_dir / "model.safetensors").exists():
        build_tiny_siglip(
            model_dir, width=args.width, layers=args.layers, image_size=args.image_size
        )
    files = pictures(args.images)
    blas = os.environ.get(PRELOADED) or "reference BLAS"
    print(
        f"{len(files)} images, random SigLIP width {args.width}, {args.layers} layers, "
        f"{args.image_size} px, batch {args.batch}, {blas}",
        flush=True,
    )
    local = InProcess(model_dir)
    local.embed(files[: args.batch], args.batch)  # first-call costs
    gateway = launch_loaded(workdir, model_dir, SERVED, "embeddings")
    figures: dict[str, list[float]] = {"in_process": [], "gateway": []}
    ratios: list[float] = []
    max_diff = 0.0
    try:
        asyncio.run(through_gateway(gateway.port, files[: args.batch], args.batch, 1))
        for round_ in range(args.rounds):
            seconds, expected = timed(lambda: local.embed(files, args.batch))
            figures["in_process"].append(len(files) / seconds)
            seconds, got = timed(
                lambda: asyncio.run(
                    through_gateway(gateway.port, files, args.batch, args.concurrency)
                )
            )
            figures["gateway"].append(len(files) / seconds)
            ratios.append(figures["gateway"][-1] / figures["in_process"][-1])
            max_diff = max(max_diff, float(np.abs(got - expected).max()))
            print(
                f"round {round_ + 1}: in-process {figures['in_process'][-1]:.1f} images/s, "
                f"gateway {figures['gateway'][-1]:.1f} images/s",
                flush=True,
            )
    finally:
        gateway.stop()
    medians = {k: statistics.median(v) for k, v in figures.items()}
    ratio = statistics.median(ratios)
    print()
    print(f"in-process mlx-embeddings : {medians['in_process']:8.1f} images/s")
    print(
        f"gateway ({args.batch} per request, {args.concurrency} in flight): "
        f"{medians['gateway']:8.1f} images/s"
    )
    print(f"ratio gateway / in-process: {ratio:.0%} (target >= 90%)")
    print(f"largest difference between the two sides' vectors: {max_diff:.2e}")
    if args.json:
        report = {
            "images": len(files),
            "batch": args.batch,
            "concurrency": args.concurrency,
            "model": {"width": args.width, "layers": args.layers, "image_size": args.image_size},
            "blas": blas,
            "rounds": figures,
            "medians": medians,
            "ratio": ratio,
            "max_abs_difference": max_diff,
        }
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
