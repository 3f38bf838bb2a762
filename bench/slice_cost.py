"""What one forward pass costs on this machine, and so how much of a batch prompt's
prefill any schedule of passes can keep beside a person's answer (issue 53's bound,
measured rather than argued).

    uv run python -m bench.slice_cost             # about a minute on 2 cores
    uv run python -m bench.slice_cost --context 2048 --json out.json

The model is bench.fairness's: SmolLM2-135M-Instruct in float32 (converted once
under ``--work``), in this process, with mlx-lm's own caches. With ``--context``
tokens already in the cache it times (median of ``--reps``, after a warm-up; the
cache is trimmed back after each pass):

* a pass reading ``k`` tokens in one row, for ``k`` from 1 to 256: at ``k`` = 1 a
  decode step (``d``: what the person's answer pays per token alone), above it the
  prefill slice of a batch prompt, and what the batch prompt reads per second alone
  at its best size (``alone``);
* a pass of two rows of ``k`` tokens: what one forward that decodes the person's
  token and reads ``k`` batch tokens costs when, as mlx-lm's batch caches do, the
  shorter row is padded to the longer.

While a person's answer decodes, its time between tokens may be at most 1.5 ``d``
on average (issue 53). Three ways to spend that half pass on the batch prompt, each
as a share of ``alone``:

* **separate slices** (what the worker does): a slice is a pass of its own, and
  slices take a third of the time; bounded (no slice longer than 1.5 ``d``) and
  unbounded (the best size; the person's slowest gap then is a whole slice);
* **padded fused**: every step one two-row pass, ``k`` as large as 1.5 ``d`` allows;
* **ragged fused** (the best one pass can do: the person's token and ``k`` batch
  tokens as ``1 + k`` rows of one sequence, attention aside): every step a pass of
  ``1 + k`` tokens within 1.5 ``d``.

And what the batch keeps over a whole run where a person's answer is in flight a
share ``busy`` of the time and the batch runs alone otherwise: ``1 - busy + busy x
share`` (the wait for the person's first token, when batch work is held, aside; so
this is an upper bound). Issue 53's targets are 0.8 beside one kind of batch work.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from .fairness_models import smollm2_f32
from .lm_report import machine
from .servers import reexec_with_openblas

SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256)
"""Prompt tokens per pass that are timed."""
TBT = 1.5
"""The person's time between tokens may be this many decode steps (issue 53)."""
SHARE = 1 - 1 / TBT
"""The share of the time separate slices may take for that (a third)."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.slice_cost")
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "mlx-gateway-bench")
    parser.add_argument("--context", type=int, default=1024, help="tokens in the cache")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--busy",
        type=float,
        nargs="+",
        default=[0.65, 0.9],
        help="shares of the time a person's answer is in flight (bench.fairness: 65-94 %%)",
    )
    parser.add_argument("--json", type=Path)
    return parser.parse_args(argv)


class Passes:
    """Times forward passes of ``model`` over a cache of ``context`` tokens per row."""

    def __init__(self, model: Any, context: int, reps: int) -> None:
        import mlx.core as mx
        from mlx_lm.models.cache import make_prompt_cache

        self.mx, self.model, self.reps = mx, model, reps
        self.vocab = int(model.args.vocab_size)
        self.caches: dict[int, list[Any]] = {}
        for rows in (1, 2):
            cache = make_prompt_cache(model)
            tokens = mx.random.randint(0, self.vocab, (rows, context))
            for start in range(0, context, 512):
                model(tokens[:, start : start + 512], cache=cache)
                mx.eval([c.state for c in cache])
            self.caches[rows] = cache

    def seconds(self, rows: int, tokens: int) -> float:
        """The median time of one pass of ``rows`` rows of ``tokens`` tokens."""
        mx, cache = self.mx, self.caches[rows]
        taken = []
        for rep in range(self.reps + 1):
            inputs = mx.random.randint(0, self.vocab, (rows, tokens))
            mx.eval(inputs)
            started = time.perf_counter()
            logits = self.model(inputs, cache=cache)
            mx.eval(logits[:, -1, :], [c.state for c in cache])
            elapsed = time.perf_counter() - started
            for c in cache:
                c.trim(tokens)
            if rep:  # the first is a warm-up
                taken.append(elapsed)
        return statistics.median(taken)


def kept(busy: float, share: float = SHARE) -> float:
    """What batch work keeps of alone over a run where a person's answer is in flight
    a share ``busy`` of the time, the batch getting ``share`` of alone meanwhile and
    all of it otherwise."""
    return 1 - busy + busy * share


def best(rates: dict[int, tuple[float, int]], budget: float) -> float:
    """Batch prompt tokens per second of the best size whose pass fits ``budget``
    seconds (``rates``: size → (seconds of its pass, batch tokens it reads))."""
    fits = [tokens / seconds for seconds, tokens in rates.values() if seconds <= budget]
    return max(fits, default=0.0)


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from mlx_lm import load

    model, _ = load(str(smollm2_f32(args.work)))
    passes = Passes(model, args.context, args.reps)
    one = {k: passes.seconds(1, k) for k in SIZES}
    decode = one[1]
    two = {k: passes.seconds(2, k) for k in SIZES if k <= 64}
    alone = max(k / s for k, s in one.items())
    budget = TBT * decode
    bounded = best({k: (s, k) for k, s in one.items()}, budget)
    ways = {
        "separate slices, bounded": SHARE * bounded / alone,
        "separate slices, unbounded": SHARE,
        "padded fused": best({k: (s, k) for k, s in two.items()}, budget) / alone,
        "ragged fused": best({k: (s, k - 1) for k, s in one.items() if k > 1}, budget) / alone,
    }
    return {
        "machine": machine(),
        "context": args.context,
        "decode_seconds": decode,
        "one_row_seconds": one,
        "two_rows_seconds": two,
        "alone_tokens_per_second": alone,
        "share_beside_a_person": ways,
        "kept_over_a_run": {
            str(busy): {way: kept(busy, share) for way, share in ways.items()} for busy in args.busy
        },
    }


def report(result: dict[str, Any]) -> list[str]:
    decode = result["decode_seconds"]
    lines = [
        f"context {result['context']} tokens; a decode step of one row {decode * 1000:.0f} ms; "
        f"the batch prompt alone reads {result['alone_tokens_per_second']:.1f} tokens/s",
        "",
        "| k | one row | x decode | tokens/s | two rows | x one row |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    two = result["two_rows_seconds"]
    for k, seconds in result["one_row_seconds"].items():
        pair = two.get(k)
        lines.append(
            f"| {k} | {seconds * 1000:.0f} ms | {seconds / decode:.2f} | {k / seconds:.1f} | "
            + (f"{pair * 1000:.0f} ms | {pair / seconds:.2f} |" if pair else "- | - |")
        )
    lines += ["", f"beside a person's answer (its time between tokens ≤ {TBT}x alone):"]
    for way, share in result["share_beside_a_person"].items():
        lines.append(f"  {way}: {share:.2f} of alone")
    for busy, kept in result["kept_over_a_run"].items():
        shown = ", ".join(f"{way} {share:.2f}" for way, share in kept.items())
        lines.append(f"over a run with a person in flight {float(busy):.0%} of the time: {shown}")
    return lines


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    reexec_with_openblas("bench.slice_cost", argv)
    args = parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    result = measure(args)
    print("\n".join(report(result)))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
