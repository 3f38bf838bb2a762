"""Rerank throughput: the gateway against the same cross-encoder in this process.

    uv run python -m bench.rerank                 # a few minutes on 2 cores
    uv run python -m bench.rerank --rounds 5 --docs 50 --json out.json

The model is a random-weight BERT cross-encoder of cross-encoder/ms-marco-MiniLM-L-6-v2's
shape (hidden 384, 6 layers, 512 positions; built here, nothing is downloaded).
Both sides score the same ``--queries`` queries against ``--docs`` documents each
(short passages of 20 to 60 words, seeded), a RAG pipeline's rerank step:

* in process: transformers tokenizes each pair (truncated to the window), the
  encoder is mlx-embeddings' BERT with the classifier applied to its pooler output,
  chunks of ``--batch`` pairs evaluated and copied to NumPy; once in input order
  (the ratio's baseline) and once with the pairs of a query sorted by length (less
  padding, as the worker does: the stronger baseline);
* through the gateway: ``mlx-gateway launch`` (the real command, one rerank
  worker), one ``POST /v1/rerank`` per query with all its documents, ``--concurrency``
  in flight;
* secondary: one document per request, 32 in flight (many small clients, batched
  together by the worker).

Every setup runs once per round, rounds interleaved; the report gives pairs/s as
medians and the ratios gateway / in-process as medians of the ratios within each
round (the target is at least 80 %), and the largest score difference between the
two sides. On Linux, OpenBLAS (when installed) is preloaded into this process, as
the gateway preloads it into its workers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .embeddings import WORDS, timed
from .servers import PRELOADED, reexec_with_openblas

SERVED = "minilm-cross-encoder"
WINDOW = 512


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.rerank", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--queries", type=int, default=20, help="queries per run")
    parser.add_argument("--docs", type=int, default=50, help="documents per query")
    parser.add_argument("--batch", type=int, default=50, help="pairs per in-process chunk")
    parser.add_argument("--concurrency", type=int, default=2, help="requests in flight")
    parser.add_argument("--rounds", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--no-singles", action="store_true", help="skip one-document requests")
    parser.add_argument("--no-openblas", action="store_true", help="do not preload OpenBLAS")
    parser.add_argument("--workdir", type=Path, help="keep the model, config and logs here")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    return parser.parse_args(argv)


def workload(queries: int, docs: int, seed: int = 0) -> list[tuple[str, list[str]]]:
    rng = random.Random(seed)

    def words(low: int, high: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))

    return [(words(3, 8), [words(20, 60) + "." for _ in range(docs)]) for _ in range(queries)]


class InProcess:
    """The cross-encoder with mlx-embeddings' BERT and transformers' tokenizer."""

    def __init__(self, model_dir: Path) -> None:
        import mlx.core as mx
        from mlx_embeddings.models import bert
        from transformers import AutoTokenizer

        config = json.loads((model_dir / "config.json").read_text())
        weights = dict(mx.load(str(model_dir / "model.safetensors")))
        self.classifier = weights.pop("classifier.weight"), weights.pop("classifier.bias")
        self.model = bert.Model(bert.ModelArgs.from_dict(config))
        self.model.load_weights([(k.removeprefix("bert."), v) for k, v in weights.items()])
        mx.eval(self.model.parameters())
        self.model.eval()  # no dropout
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))

    def score(self, query: str, docs: list[str], batch: int, by_length: bool = False) -> np.ndarray:
        import mlx.core as mx

        enc = self.tokenizer([query] * len(docs), docs, truncation="only_second", max_length=WINDOW)
        order = list(range(len(docs)))
        if by_length:
            order.sort(key=lambda i: len(enc["input_ids"][i]))
        out = np.empty(len(docs), dtype=np.float64)
        weight, bias = self.classifier
        for start in range(0, len(docs), batch):
            rows = order[start : start + batch]
            padded = self.tokenizer.pad(
                {k: [enc[k][i] for i in rows] for k in ("input_ids", "token_type_ids")},
                return_tensors="np",
            )
            output = self.model(
                mx.array(padded["input_ids"]),
                token_type_ids=mx.array(padded["token_type_ids"]),
                attention_mask=mx.array(padded["attention_mask"]),
            )
            logits = output.pooler_output @ weight.T + bias
            out[rows] = np.array(mx.sigmoid(logits[:, 0]))
        return out


class Gateway:
    """``mlx-gateway launch --config …`` serving the model, loaded at launch."""

    def __init__(self, workdir: Path, model_dir: Path) -> None:
        from .servers import launch_loaded

        self.server = launch_loaded(workdir, model_dir, SERVED, "rerank")
        self.port = self.server.port
        self.process = self.server.process

    def stop(self) -> None:
        self.server.stop()

    async def score(
        self, work: list[tuple[str, list[str]]], concurrency: int, per_request: int | None = None
    ) -> list[np.ndarray]:
        """Every query's scores (document order); ``per_request`` documents per request
        (default: all of a query's)."""
        import httpx

        jobs = [
            (q, start, docs[start : start + (per_request or len(docs))])
            for q, (_, docs) in enumerate(work)
            for start in range(0, len(docs), per_request or len(docs))
        ]
        results = [np.empty(len(docs)) for _, docs in work]
        pending = iter(jobs)
        limits = httpx.Limits(max_connections=concurrency)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{self.port}/v1", timeout=300, limits=limits
        ) as client:

            async def worker() -> None:
                for q, start, docs in pending:
                    body = {"model": SERVED, "query": work[q][0], "documents": docs}
                    response = await client.post("/rerank", json=body)
                    response.raise_for_status()
                    for r in response.json()["results"]:
                        results[q][start + r["index"]] = r["relevance_score"]

            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return results


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if not args.no_openblas:
        reexec_with_openblas("bench.rerank", argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    from tests.fixtures.tiny_cross_encoder import build_tiny_cross_encoder

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-rerank-"))
    workdir.mkdir(parents=True, exist_ok=True)
    model_dir = workdir / "model"
    if not (model_dir / "model.safetensors").exists():
        build_tiny_cross_encoder(model_dir, max_length=WINDOW, hidden=384, layers=6)
    work = workload(args.queries, args.docs)
    pairs = sum(len(docs) for _, docs in work)
    blas = os.environ.get(PRELOADED) or "reference BLAS"
    print(f"{pairs} pairs ({args.queries} queries x {args.docs} documents), {blas}", flush=True)

    local = InProcess(model_dir)
    local.score(*work[0], args.batch)  # first-call costs
    gateway = Gateway(workdir, model_dir)
    figures: dict[str, list[float]] = {
        "in_process": [],
        "in_process_by_length": [],
        "gateway": [],
        "gateway_singles": [],
    }
    ratios: dict[str, list[float]] = {"in_process": [], "in_process_by_length": []}
    max_diff = 0.0
    try:
        asyncio.run(gateway.score(work[:1], 1))  # warm the worker
        for round_ in range(args.rounds):
            seconds, expected = timed(lambda: [local.score(q, d, args.batch) for q, d in work])
            figures["in_process"].append(pairs / seconds)
            seconds, _ = timed(lambda: [local.score(q, d, args.batch, True) for q, d in work])
            figures["in_process_by_length"].append(pairs / seconds)
            seconds, got = timed(lambda: asyncio.run(gateway.score(work, args.concurrency)))
            figures["gateway"].append(pairs / seconds)
            for key in ratios:
                ratios[key].append(figures["gateway"][-1] / figures[key][-1])
            diff = max(float(np.abs(g - e).max()) for g, e in zip(got, expected, strict=True))
            max_diff = max(max_diff, diff)
            line = (
                f"round {round_ + 1}: in-process {figures['in_process'][-1]:.1f} pairs/s "
                f"(by length {figures['in_process_by_length'][-1]:.1f}), "
                f"gateway {figures['gateway'][-1]:.1f} pairs/s"
            )
            if not args.no_singles:
                seconds, _ = timed(lambda: asyncio.run(gateway.score(work, 32, per_request=1)))
                figures["gateway_singles"].append(pairs / seconds)
                line += f", gateway one document per request {figures['gateway_singles'][-1]:.1f}"
            print(line, flush=True)
    finally:
        gateway.stop()

    medians = {k: statistics.median(v) for k, v in figures.items() if v}
    ratio = statistics.median(ratios["in_process"])
    ratio_by_length = statistics.median(ratios["in_process_by_length"])
    print()
    print(f"in-process (batch {args.batch})       : {medians['in_process']:8.1f} pairs/s")
    print(f"in-process, by length          : {medians['in_process_by_length']:8.1f} pairs/s")
    print(
        f"gateway ({args.docs} per request, {args.concurrency} in flight): "
        f"{medians['gateway']:8.1f} pairs/s"
    )
    if "gateway_singles" in medians:
        print(f"gateway (1 per request, 32 in flight): {medians['gateway_singles']:8.1f} pairs/s")
    print(f"ratio gateway / in-process: {ratio:.0%} (target >= 80%)")
    print(f"ratio gateway / in-process by length: {ratio_by_length:.0%}")
    print(f"largest difference between the two sides' scores: {max_diff:.2e}")
    if args.json:
        report: dict[str, Any] = {
            "pairs": pairs,
            "queries": args.queries,
            "docs": args.docs,
            "batch": args.batch,
            "concurrency": args.concurrency,
            "blas": blas,
            "rounds": figures,
            "medians": medians,
            "ratio": ratio,
            "ratio_by_length": ratio_by_length,
            "max_abs_difference": max_diff,
        }
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
