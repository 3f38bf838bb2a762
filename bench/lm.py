"""Language-model throughput: the gateway against mlx-lm in-process and mlx_lm.server.

    uv run python -m bench.lm            # about 8 minutes on 2 cores
    uv run python -m bench.lm --rounds 5 --profile --json out.json
    uv run python -m bench.lm --streams 1 32 --also-interval 0.05   # a second gateway, A/B
    uv run python -m bench.lm --model ~/models/SmolLM2-135M --max-tokens 64   # a real model

One run measures, side by side on the same tiny llama (built here, hidden 64,
2 layers, random weights that never emit EOS, so every request generates exactly
``--max-tokens`` tokens):

* the limit: ``mlx_lm.stream_generate`` (1 stream) and ``BatchGenerator`` (8 and 32
  sequences) in this process;
* ``mlx-gateway launch`` (the real command) and ``python -m mlx_lm.server`` at 1, 8
  and 32 concurrent streams: aggregate tokens/s, time to first token p50/p99, errors;
* the time to first token of the second turn of a 2,000-token conversation against
  the first turn's (the prompt cache);
* the gateway's and the worker's CPU time per relayed token at 32 streams.

``--model DIR`` measures an mlx-lm model folder instead of the tiny llama: the
prompts ask for a story, and every setup stops at the model's end of turn.

Every setup runs once per round, rounds interleaved, and the report gives medians:
on a shared machine the ratios between setups measured in the same round are what
counts. On Linux, OpenBLAS (when installed) is preloaded into this process and
into mlx_lm.server, as the gateway preloads it into its workers, so all three
compute with the same BLAS.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .lm_report import machine, report
from .lm_workload import SERVED_NAME, build_model, long_message, messages_for, tokens_for
from .servers import reexec_with_openblas, yaml_pairs


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.lm", description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens per request")
    parser.add_argument(
        "--requests-per-stream", type=int, default=4, help="requests each stream sends in a row"
    )
    parser.add_argument("--streams", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument(
        "--vary-tokens",
        type=float,
        default=0.0,
        metavar="F",
        help="at several streams, the i-th request's max_tokens spread evenly over "
        "--max-tokens x (1 ± F), the same lengths on every setup, so that sequences "
        "end in different steps as real answers do (default 0: all equal)",
    )
    parser.add_argument(
        "--single-requests",
        type=int,
        default=8,
        help="requests per round at 1 stream, alternating between the setups (default 8)",
    )
    parser.add_argument("--prefill-batch", type=int, default=8, help="prompts prefilled together")
    parser.add_argument(
        "--stream-interval",
        type=float,
        help="the gateway model's stream_interval (seconds; default: the config's default)",
    )
    parser.add_argument(
        "--also-interval",
        type=float,
        help="a second gateway with this stream_interval, measured in the same rounds",
    )
    parser.add_argument(
        "--also-worker-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a second gateway whose model has this worker_env entry (repeatable; "
        "with --also-interval, one gateway with both)",
    )
    parser.add_argument(
        "--also-label",
        help="the second gateway's name in the report (default: its options; no '/')",
    )
    parser.add_argument(
        "--also-entry",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a second gateway whose model entry has this key (the value read as YAML; "
        "repeatable, combines with the other --also options), e.g. "
        "--also-entry prompt_cache_entries=0",
    )
    parser.add_argument(
        "--also-checkout",
        type=Path,
        metavar="DIR",
        help="a second gateway run from another clone of this repo (its .venv, made with "
        "uv sync), e.g. a worktree of the commit before a change: two versions side by side",
    )
    parser.add_argument("--conversations", type=int, default=5, help="2,000-token conversations")
    parser.add_argument("--no-mlx-lm-server", action="store_true", help="skip mlx_lm.server")
    parser.add_argument("--no-openblas", action="store_true", help="do not preload OpenBLAS here")
    parser.add_argument(
        "--profile", action="store_true", help="py-spy the gateway and worker at 32 streams"
    )
    parser.add_argument(
        "--model",
        type=Path,
        help="an mlx-lm model folder to measure instead of the built tiny llama (its "
        "answers may end before --max-tokens: rates count the tokens each setup made)",
    )
    parser.add_argument("--workdir", type=Path, help="keep the model, logs and profiles here")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    return parser.parse_args(argv)


# ---------------------------------------------------------------- measuring


@dataclass
class Figures:
    """Every round's figure for each named measurement."""

    series: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, value: float) -> None:
        self.series.setdefault(name, []).append(value)

    def median(self, name: str) -> float:
        from .client import median

        return median(self.series.get(name, []))


def cpu_seconds(process: Any) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def http_run(
    server: Any,
    streams: int,
    args: argparse.Namespace,
    offset: int,
    requests: int | None = None,
) -> Any:
    """``streams`` closed-loop clients, each sending ``requests`` requests
    (``--requests-per-stream`` by default)."""
    from .client import chat_body, closed_loop

    def body(i: int) -> bytes:
        messages = messages_for(offset + i, args.model is not None)
        return chat_body(server.model_name, messages, tokens_for(args, i, streams))

    count = args.requests_per_stream if requests is None else requests
    return asyncio.run(closed_loop(server.port, streams, count, body))


def record_http(figures: Figures, label: str, streams: int, run: Any) -> None:
    from .client import summarize

    summary = summarize(run)
    figures.add(f"{label}/{streams}/tok_s", summary["tok_s"])
    figures.add(f"{label}/{streams}/ttft_p50_ms", summary["ttft_p50_ms"])
    figures.add(f"{label}/{streams}/ttft_p99_ms", summary["ttft_p99_ms"])
    figures.add(f"{label}/{streams}/errors", summary["errors"])
    figures.add(f"{label}/{streams}/requests", summary["requests"])


def one_round(
    args: argparse.Namespace, figures: Figures, model: Any, tokenizer: Any, servers: dict[str, Any]
) -> None:
    """Every setup once per stream count, so that the ratios between them see the
    same machine load: one stream alternates request by request
    (:func:`single_stream`); more streams run each setup twice, in mirrored order
    (limit, servers, servers reversed, limit), half the requests each time, so
    that a load that grows or fades during the round weighs on all setups alike."""
    import psutil

    def prompt_for(i: int) -> list[int]:
        messages = messages_for(i, args.model is not None)
        return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True))

    big = max(args.streams)
    for streams in args.streams:
        if streams == 1:
            single_stream(args, figures, model, tokenizer, prompt_for, servers)
            continue
        totals = mirrored_runs(args, streams, model, prompt_for, servers, psutil.Process())
        limit = totals.pop("limit")
        figures.add(f"limit/{streams}/tok_s", limit.run.tokens_per_second)
        figures.add(f"limit/{streams}/ttft_p50_ms", limit.run.ttft_percentile(50) * 1000)
        figures.add(f"limit/{streams}/ttft_p99_ms", limit.run.ttft_percentile(99) * 1000)
        if streams == big and limit.run.tokens:
            figures.add("limit/cpu_us_per_token/workers", limit.cpu[0] * 1e6 / limit.run.tokens)
            figures.add("limit/cores/workers", limit.cpu[0] / limit.run.wall)
        for label, total in totals.items():
            run = total.run
            record_http(figures, label, streams, run)
            if streams == big and run.tokens:
                server, workers, client = total.cpu
                per_token = 1e6 / run.tokens
                figures.add(f"{label}/cpu_us_per_token/server", server * per_token)
                figures.add(f"{label}/cpu_us_per_token/workers", workers * per_token)
                figures.add(f"{label}/cpu_us_per_token/client", client * per_token)
                figures.add(f"{label}/cores/server", server / run.wall)
                figures.add(f"{label}/cores/workers", workers / run.wall)


@dataclass
class Total:
    """One setup's runs within a round, merged, and the CPU seconds they took:
    ``(this process)`` for the limit, ``(server, its workers, this client)`` for a
    server."""

    run: Any
    cpu: list[float]


def mirrored_runs(
    args: argparse.Namespace,
    streams: int,
    model: Any,
    prompt_for: Any,
    servers: dict[str, Any],
    me: Any,
) -> dict[str, Total]:
    from .client import Run
    from .inprocess import batch_generator_run

    half = max(1, args.requests_per_stream // 2)
    order = ["limit", *servers, *reversed(list(servers)), "limit"]
    totals = {label: Total(Run(streams), [0.0] * (1 if label == "limit" else 3)) for label in order}
    for label in order:
        total = totals[label]
        if label == "limit":
            before = cpu_seconds(me)
            run = batch_generator_run(
                model,
                prompt_for,
                streams,
                half,
                args.max_tokens,
                args.prefill_batch,
                args.stop_tokens,
                lambda i: tokens_for(args, i, streams),
            )
            total.cpu[0] += cpu_seconds(me) - before
        else:
            server = servers[label]
            offset = int(time.monotonic() * 1000) % 100_000  # fresh prompts every run
            processes = [server.process, *server.children()]
            before_all = [cpu_seconds(p) for p in processes]
            client_before = cpu_seconds(me)
            run = http_run(server, streams, args, offset, requests=half)
            used = [cpu_seconds(p) - b for p, b in zip(processes, before_all, strict=True)]
            total.cpu[0] += used[0]
            total.cpu[1] += sum(used[1:])
            total.cpu[2] += cpu_seconds(me) - client_before
        total.run.results += run.results
        total.run.wall += run.wall
    return totals


def single_stream(
    args: argparse.Namespace,
    figures: Figures,
    model: Any,
    tokenizer: Any,
    prompt_for: Any,
    servers: dict[str, Any],
) -> None:
    """One stream: the setups take turns request by request (in process, then each
    server, with the same prompt), so that every pair of requests compared ran
    within a second of each other. A request lasts a fraction of a second at one
    stream, and on a shared machine the speed drifts by more than the differences
    measured here over a few seconds; alternating cancels the drift, and each
    request pair gives one ratio (``…/1/pair_ratio``)."""
    from .client import Run
    from .inprocess import stream_generate_run

    offset = int(time.monotonic() * 1000) % 100_000  # fresh prompts every round
    runs = {"limit": Run(1), **{label: Run(1) for label in servers}}
    for k in range(args.single_requests):
        index = offset + k
        one = stream_generate_run(
            model, tokenizer, lambda i, first=index: prompt_for(first + i), 1, args.max_tokens
        )
        runs["limit"].results += one.results
        runs["limit"].wall += one.wall
        for label, server in servers.items():
            single = http_single(server, args, index)
            runs[label].results += single.results
            runs[label].wall += single.wall
            if one.tokens_per_second and single.tokens and single.errors == 0:
                # per token: a real model's answers may differ in length
                ratio = single.tokens_per_second / one.tokens_per_second
                figures.add(f"{label}/1/pair_ratio", ratio)
    limit = runs.pop("limit")
    figures.add("limit/1/tok_s", limit.tokens_per_second)
    figures.add("limit/1/ttft_p50_ms", limit.ttft_percentile(50) * 1000)
    for label, run in runs.items():
        record_http(figures, label, 1, run)


def http_single(server: Any, args: argparse.Namespace, index: int) -> Any:
    """One streamed request with the prompt of ``messages_for(index)``."""
    from .client import chat_body, closed_loop

    messages = messages_for(index, args.model is not None)
    body = chat_body(server.model_name, messages, args.max_tokens)
    return asyncio.run(closed_loop(server.port, 1, 1, lambda _: body))


def second_turns(
    args: argparse.Namespace, figures: Figures, tokenizer: Any, servers: dict[str, Any]
) -> None:
    """TTFT of turn 2 / turn 1 of 2,000-token conversations (each one new)."""
    from .client import chat_body, stream_chat, stream_text

    base = int(time.time()) % 10_000
    for label, server in servers.items():
        for k in range(args.conversations):
            first = [{"role": "user", "content": long_message(tokenizer, base + k, 1950)}]
            one = asyncio.run(
                stream_chat(server.port, chat_body(server.model_name, first, 16), keep_body=True)
            )
            if one.error or one.ttft is None:
                figures.add(f"{label}/turn/errors", 1)
                continue
            second = [
                *first,
                {"role": "assistant", "content": stream_text(one.body)},
                {"role": "user", "content": "Please go on."},
            ]
            two = asyncio.run(stream_chat(server.port, chat_body(server.model_name, second, 16)))
            if two.error or two.ttft is None:
                figures.add(f"{label}/turn/errors", 1)
                continue
            figures.add(f"{label}/turn1_ttft_ms", one.ttft * 1000)
            figures.add(f"{label}/turn2_ttft_ms", two.ttft * 1000)
            figures.add(f"{label}/turn2_over_turn1", two.ttft / one.ttft)
            figures.add(f"{label}/turn2_cached_tokens", two.cached_tokens)
        base += args.conversations


def profile_gateway(args: argparse.Namespace, gateway: Any, workdir: Path) -> dict[str, str]:
    from .profile import Recording, summarize

    worker = gateway.children()[0]
    recordings = {
        "gateway": Recording(gateway.process.pid, workdir / "gateway.pyspy.txt"),
        "worker": Recording(worker.pid, workdir / "worker.pyspy.txt", idle=False),
    }
    time.sleep(1.0)  # py-spy attaches
    http_run(gateway, max(args.streams), args, offset=900_000)
    summaries = {}
    for name, recording in recordings.items():
        errors = recording.stop()
        if recording.out.exists():
            summaries[name] = summarize(recording.out)
        else:
            summaries[name] = f"(py-spy wrote nothing: {errors.strip()[-500:]})"
    return summaries


# ---------------------------------------------------------------- setups


def also_gateway(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """The second gateway's label and the keys its model entry adds."""
    extra: dict[str, Any] = {}
    parts = []
    if args.also_interval is not None:
        extra["stream_interval"] = args.also_interval
        parts.append(f"{args.also_interval:g}s")
    if args.also_worker_env:
        env = dict(item.split("=", 1) for item in args.also_worker_env)
        extra["worker_env"] = env
        parts += [f"{k}={v}" for k, v in env.items()]
    extra.update(yaml_pairs(args.also_entry, "--also-entry"))
    parts += args.also_entry
    if args.also_checkout is not None:
        parts.append(args.also_checkout.name)
    label = args.also_label or ",".join(parts).replace("/", "|")  # '/' splits figure keys
    return "mlx-gateway@" + label, extra


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if not args.no_openblas:
        reexec_with_openblas("bench.lm", argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    info = machine()
    info["load_average_start"] = info["load_average"]

    from mlx_lm import load

    from .servers import start_gateway, start_mlx_lm_server

    with tempfile.TemporaryDirectory(prefix="bench-lm-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        if args.model is not None:
            model_dir = args.model.resolve()
            info["model"] = str(model_dir)
        else:
            model_dir = build_model(workdir / "tiny-lm")
        model, tokenizer = load(str(model_dir))
        # A real model ends its answers: the in-process limit stops at the same
        # tokens as the servers (the tiny llama never makes them).
        args.stop_tokens = [[t] for t in tokenizer.eos_token_ids] if args.model else None
        big = max(args.streams)
        servers: dict[str, Any] = {}
        figures = Figures()
        try:
            print("starting mlx-gateway …", flush=True)
            extra = (
                {} if args.stream_interval is None else {"stream_interval": args.stream_interval}
            )
            servers["mlx-gateway"] = start_gateway(
                workdir, model_dir, SERVED_NAME, big, args.prefill_batch, extra
            )
            also = (args.also_interval, args.also_checkout)
            if any(v is not None for v in also) or args.also_worker_env or args.also_entry:
                label, extra = also_gateway(args)
                print(f"starting {label} …", flush=True)
                (workdir / "also").mkdir(exist_ok=True)
                servers[label] = start_gateway(
                    workdir / "also",
                    model_dir,
                    SERVED_NAME,
                    big,
                    args.prefill_batch,
                    extra,
                    args.also_checkout,
                )
            if not args.no_mlx_lm_server:
                print("starting mlx_lm.server …", flush=True)
                env = {**os.environ}
                servers["mlx_lm.server"] = start_mlx_lm_server(
                    workdir, model_dir, big, args.prefill_batch, env
                )
            for name, server in servers.items():  # warm up: load, first compilations
                run = http_run(
                    server,
                    big,
                    argparse.Namespace(**{**vars(args), "requests_per_stream": 1}),
                    500_000,
                )
                if run.errors:
                    raise RuntimeError(
                        f"{name} warm-up failed: {run.results[0].error}\n{server.log()}"
                    )
            health = servers["mlx-gateway"].get("/health")
            for r in range(args.rounds):
                print(f"round {r + 1}/{args.rounds} …", flush=True)
                one_round(args, figures, model, tokenizer, servers)
            print("second turns …", flush=True)
            second_turns(args, figures, tokenizer, servers)
            profiles = (
                profile_gateway(args, servers["mlx-gateway"], workdir) if args.profile else {}
            )
        finally:
            for server in servers.values():
                server.stop()
        info["load_average"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
        lines = report(args, figures, info)
        print()
        print("\n".join(lines))
        print(f"\ngateway /health: {json.dumps(health)}")
        for name, text in profiles.items():
            print(f"\npy-spy profile of the {name} at {big} streams:\n{text}")
        if args.json:
            args.json.write_text(
                json.dumps(
                    {"machine": info, "figures": figures.series, "profiles": profiles}, indent=1
                )
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
