"""The lm worker's step, feature by feature: its backend against mlx-lm's
``stream_generate`` (one stream, the solo path) or ``BatchGenerator`` (``--streams``
above 1, the batch path) in one process.

    uv run python -m bench.solo                 # about a minute on 2 cores
    uv run python -m bench.solo --pairs 20 --max-tokens 256 --json out.json
    uv run python -m bench.solo --streams 32 --max-tokens 128 --pairs 4
    uv run python -m bench.solo --streams 32 --max-tokens 128 --requests-per-stream 4
    uv run python -m bench.solo --streams 32 --requests-per-stream 4 --vary-tokens 0.5

The lm worker's backend (``LmBackend``, the code a worker runs, without ZeroMQ or
the gateway) decodes one greedy request alone, and ``stream_generate`` the same
prompt ids with the same model object, request by request in alternating order
(``--pairs`` pairs). The model is bench.lm's: the tests' tiny llama (hidden 64,
2 layers) with its EOS row zeroed, so every request generates ``--max-tokens``.

With ``--streams N`` the backend gets N requests at once (``max_concurrency`` N)
and the baseline is ``BatchGenerator`` with N sequences (prefill batch 8); the
token counts must be equal. ``--requests-per-stream`` K gives each of the N slots K
requests in a row on both sides, the next one as soon as the last ended, as
``bench.lm``'s clients do: the refills (prefills beside running sequences, new
sequences merged into the running batch) are then part of the comparison.
``--vary-tokens F`` spreads the requests' lengths as ``bench.lm``'s option does.
The baseline is mlx-lm as it ships: the worker's own ``BatchKVCache.filter``
(:mod:`mlx_gateway.workers.lm.batch_filter`) is set aside while it runs.

It prints the median ratio backend / ``stream_generate`` (the target: at least
0.95, what the 1-stream figure of ``bench.lm`` can reach at best; 0.92 against
``BatchGenerator``), and where the
backend's time per generated token goes: each part of its step is timed with
``perf_counter`` around the method that does it (the model's step and reading its
token; detokenizing, stop strings and tool scans; the message coalescer;
admission; the rest of ``step``), so a feature that adds cost to every step shows
as a line of its own. The token ids of both sides must be equal (checked).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .servers import reexec_with_openblas, yaml_pairs
from .speculative import build

PROMPT = "Models stream tokens; the gateway relays them to every client."
TARGET = 0.95
BATCH_TARGET = 0.92
"""bench.lm's targets: 1 stream against stream_generate, 32 against BatchGenerator."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.solo", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--pairs", type=int, default=12, help="request pairs (default 12)")
    parser.add_argument("--max-tokens", type=int, default=256, help="tokens per request")
    parser.add_argument(
        "--streams",
        type=int,
        default=1,
        help="requests at once: above 1 the backend batches them and the baseline is "
        "BatchGenerator (completion batch = streams, prefill batch 8)",
    )
    parser.add_argument(
        "--requests-per-stream",
        type=int,
        default=1,
        help="with --streams above 1: requests each slot takes in a row, the next one "
        "given as soon as the last ended (bench.lm's closed loop; default 1)",
    )
    parser.add_argument(
        "--vary-tokens",
        type=float,
        default=0.0,
        metavar="F",
        help="with --streams above 1: spread the requests' max_tokens evenly over "
        "max-tokens x (1 +- F), the i-th request the same on both sides (bench.lm's "
        "option: sequences then end in different steps, as real answers do)",
    )
    parser.add_argument(
        "--profiled", type=int, default=4, help="backend requests timed part by part"
    )
    parser.add_argument(
        "--model",
        type=Path,
        help="an mlx-lm model folder instead of the built tiny llama (a real model's "
        "batched answers may differ from the library's by a token: counts are then "
        "compared, not ids)",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a model option for the backend (as under a model's options: in the "
        "config), the value read as YAML; repeatable, e.g. --option prompt_cache_entries=0",
    )
    parser.add_argument("--no-openblas", action="store_true", help="do not preload OpenBLAS")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    return parser.parse_args(argv)


class Timers:
    """Seconds spent in named methods, wrapped in place (innermost first: the
    outer ones' figures include the inner ones, :meth:`self_times` takes them out)."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)
        self._inside: list[str] = []
        self._nested: dict[str, float] = defaultdict(float)
        self._undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, method: str, name: str) -> None:
        inner: Callable[..., Any] = getattr(owner, method)
        total, inside, nested = self.total, self._inside, self._nested
        clock = time.perf_counter

        def timed(*args: Any, **kwargs: Any) -> Any:
            inside.append(name)
            started = clock()
            try:
                return inner(*args, **kwargs)
            finally:
                spent = clock() - started
                inside.pop()
                total[name] += spent
                if inside:
                    nested[inside[-1]] += spent

        before = owner.__dict__.get(method) if isinstance(owner, type) else None
        setattr(owner, method, timed)
        if isinstance(owner, type):
            self._undo.append(lambda: setattr(owner, method, before))
        else:
            self._undo.append(lambda: delattr(owner, method))

    def unwrap(self) -> None:
        """Put every wrapped method back."""
        while self._undo:
            self._undo.pop()()

    def self_times(self) -> dict[str, float]:
        return {name: spent - self._nested[name] for name, spent in self.total.items()}

    def reset(self) -> None:
        self.total.clear()
        self._nested.clear()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not args.no_openblas:
        reexec_with_openblas("bench.solo", argv)
    import mlx.core as mx
    from mlx_lm.generate import stream_generate
    from mlx_lm.sample_utils import make_sampler

    from mlx_gateway.protocol.messages import Done, Generate, SamplingParams
    from mlx_gateway.protocol.spec import WorkerSpec
    from mlx_gateway.workers.lm import batch_filter, prefill, solo
    from mlx_gateway.workers.lm.backend import LmBackend

    from .inprocess import batch_generator_run
    from .lm_workload import tokens_for

    tmp = tempfile.TemporaryDirectory(prefix="bench-solo-")
    path = args.model or build(Path(tmp.name) / "model", 64, 2, 0, seed=0)
    spec = WorkerSpec(
        worker_id="bench",
        kind="lm",
        model_path=str(path),
        served_model_name="bench",
        max_concurrency=max(args.streams, 8),  # bench.lm's gateway: max_concurrency 32
        options=yaml_pairs(args.option, "--option"),
    )
    replies: list[Any] = []
    backend = LmBackend()
    backend.load(spec, replies.append)
    ids = backend.tokenizer.encode(PROMPT)

    def prompt_for(i: int) -> list[int]:
        return ids if args.streams == 1 else backend.tokenizer.encode(f"{PROMPT} {i}")

    greedy = make_sampler(0.0)

    def budget(i: int) -> int:
        return tokens_for(args, i, args.streams)

    requests = args.requests_per_stream if args.streams > 1 else 1

    cpu: dict[str, float] = defaultdict(float)

    def backend_side() -> tuple[float, list[int]]:
        tokens: list[int] = []
        advance, take_plain = backend.scheduler._advance, backend.scheduler._take_plain

        def spy(active: Any, token: int, *rest: Any) -> Any:
            tokens.append(token)
            return advance(active, token, *rest)

        def spy_plain(active: Any, token: int) -> None:
            tokens.append(token)
            take_plain(active, token)

        backend.scheduler._advance = spy  # type: ignore[method-assign]
        backend.scheduler._take_plain = spy_plain  # type: ignore[method-assign]
        replies.clear()
        cpu_started, started = time.process_time(), time.perf_counter()
        total = args.streams * requests

        def submit(i: int) -> None:
            sampling = SamplingParams(max_tokens=budget(i), temperature=0.0)
            msg = Generate(request_id=f"r{i}", prompt=prompt_for(i), sampling=sampling)
            backend.submit(msg, [])

        for i in range(args.streams):
            submit(i)
        sent, seen = args.streams, 0
        while backend.has_work():
            backend.step()
            ended = sum(isinstance(r, Done) for r in replies[seen:])
            seen = len(replies)
            for _ in range(min(ended, total - sent)):  # each slot takes its next request
                submit(sent)
                sent += 1
        seconds = time.perf_counter() - started
        cpu["backend"] += time.process_time() - cpu_started
        backend.scheduler._advance, backend.scheduler._take_plain = advance, take_plain  # type: ignore[method-assign]
        assert sum(isinstance(r, Done) for r in replies) == total
        return seconds, tokens

    def library_side() -> tuple[float, list[int]]:
        if args.streams > 1:
            cpu_started = time.process_time()
            with batch_filter.library_method():  # mlx-lm as it ships
                run = batch_generator_run(
                    backend.model,
                    prompt_for,
                    args.streams,
                    requests,
                    args.max_tokens,
                    8,
                    max_tokens_for=budget,
                )
            cpu["library"] += time.process_time() - cpu_started
            return run.wall, [0] * sum(r.tokens for r in run.results)
        tokens: list[int] = []
        cpu_started, started = time.process_time(), time.perf_counter()
        for response in stream_generate(
            backend.model, backend.tokenizer, mx.array(ids), args.max_tokens, sampler=greedy
        ):
            tokens.append(response.token)
        seconds = time.perf_counter() - started
        cpu["library"] += time.process_time() - cpu_started
        return seconds, tokens

    backend_side(), library_side()  # warm up
    cpu.clear()
    ratios, ours, theirs = [], [], []
    counted = {"backend": 0, "library": 0}
    for pair in range(args.pairs):
        order = [backend_side, library_side] if pair % 2 == 0 else [library_side, backend_side]
        results = {side.__name__: side() for side in order}
        (seconds, tokens), (lib_seconds, lib_tokens) = (
            results["backend_side"],
            results["library_side"],
        )
        if args.streams == 1 and tokens != lib_tokens:
            print("the backend and stream_generate generated other token ids", file=sys.stderr)
            return 1
        if len(tokens) != len(lib_tokens):
            print(
                f"the backend and BatchGenerator generated other counts: "
                f"{len(tokens)} and {len(lib_tokens)}",
                file=sys.stderr,
            )
            if args.model is None:
                return 1
        counted["backend"] += len(tokens)
        counted["library"] += len(lib_tokens)
        ours.append(len(tokens) / seconds)
        theirs.append(len(lib_tokens) / lib_seconds)
        ratios.append(ours[-1] / theirs[-1])
    ratio = statistics.median(ratios)
    library = "stream_generate" if args.streams == 1 else "BatchGenerator"
    target = TARGET if args.streams == 1 else BATCH_TARGET
    refills = f", {requests} requests per stream" if requests > 1 else ""
    if args.vary_tokens and args.streams > 1:
        refills += f", lengths spread by ±{args.vary_tokens:g}"
    print(
        f"{args.streams} greedy stream(s) of {args.max_tokens} tokens{refills}, "
        f"{args.pairs} pairs "
        f"(medians): backend {statistics.median(ours):,.0f} tok/s, {library} "
        f"{statistics.median(theirs):,.0f} tok/s"
    )
    held = "holds" if ratio >= target else "does not hold"
    print(
        f"backend / {library}: {ratio:.3f} (pairs {min(ratios):.2f} to "
        f"{max(ratios):.2f}); target >= {target}: {held}"
    )
    cpu_ratio = (cpu["library"] / counted["library"]) / (cpu["backend"] / counted["backend"])
    print(
        f"CPU time (all threads of this process) per token: backend "
        f"{cpu['backend'] / counted['backend'] * 1e6:.0f} µs, {library} "
        f"{cpu['library'] / counted['library'] * 1e6:.0f} µs: ratio {cpu_ratio:.3f} "
        "(steadier than wall time on a shared machine)"
    )
    # Where the backend's time goes: timed apart from the pairs (the timers cost a
    # few µs per token themselves).
    timers = Timers()
    timers.wrap(solo.SoloDecode, "step", "model step (SoloDecode.step)")
    timers.wrap(backend.scheduler, "_take_token", "detokenize (_take_token)")
    timers.wrap(backend.scheduler, "_take_plain", "a plain request's token (_take_plain)")
    timers.wrap(backend.scheduler, "_apply_stops", "stop strings (_apply_stops)")
    timers.wrap(backend.scheduler, "_advance", "the rest of _advance (logprobs, tools, Chunk)")
    timers.wrap(backend.scheduler, "_solo_finish", "finish check (_solo_finish)")
    timers.wrap(backend.scheduler, "_solo_step", "the rest of _solo_step (prefill pace, finish)")
    timers.wrap(backend.scheduler._out, "add", "coalescer (Coalescer.add)")
    if backend.scheduler._generator is not None:
        timers.wrap(backend.scheduler._generator, "next", "model step (BatchGenerator.next)")
    timers.wrap(backend.scheduler, "_keep_cache", "prompt cache (_keep_cache)")
    timers.wrap(backend.scheduler, "_finish", "ending a request (_finish)")
    timers.wrap(prefill, "progress", "prefill progress (prefill.progress)")
    timers.wrap(backend.scheduler, "_admit", "admission (_admit)")
    timers.wrap(backend.scheduler, "step", "backend.step")

    steps = 0
    for _ in range(args.profiled):
        steps += len(backend_side()[1])
    timers.unwrap()
    per_token = {name: spent / steps * 1e6 for name, spent in timers.self_times().items()}
    print("backend time per generated token (self time, µs):")
    for name, micro in sorted(per_token.items(), key=lambda kv: -kv[1]):
        print(f"  {micro:8.1f}  {name}")
    print(
        f"  {sum(per_token.values()):8.1f}  in all; {library}: "
        f"{1e6 / statistics.median(theirs):.1f} per token"
    )
    if args.json:
        figures = {
            "ratio": ratio,
            "ratios": ratios,
            "cpu_ratio": cpu_ratio,
            "per_token_us": per_token,
        }
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, **figures}))
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
