"""The report of ``bench.lm``: the machine, the table of rates, and issue 25's
targets with whether each holds (ratios paired within each round)."""

from __future__ import annotations

import argparse
import os
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .servers import PRELOADED

if TYPE_CHECKING:
    from .lm import Figures


def machine() -> dict[str, Any]:
    from importlib.metadata import version

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import mlx.core as mx

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "device": str(mx.default_device()),
        "system": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "mlx": version("mlx"),
        "mlx-lm": version("mlx-lm"),
        "blas": os.environ.get(PRELOADED) or "the wheel's own (no OpenBLAS preloaded)",
        "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def server_labels(figures: Figures, streams: int) -> list[str]:
    """The servers measured, in the order the report gives them."""
    found = {k.split("/")[0] for k in figures.series if k.endswith(f"/{streams}/tok_s")}
    found.discard("limit")
    return sorted(found, key=lambda k: (k != "mlx-gateway", k == "mlx_lm.server", k))


def _fmt(value: float, digits: int = 0) -> str:
    return "—" if value != value else f"{value:,.{digits}f}"


def report(args: argparse.Namespace, figures: Figures, info: dict[str, Any]) -> list[str]:
    med = figures.median
    big = max(args.streams)
    labels = [("limit", "mlx-lm in-process (the limit)")]
    labels += [(k, k) for k in server_labels(figures, big)]
    lines = [
        f"machine: {info['cpu']}, {info['cores']} cores, {info['system']}, "
        f"Python {info['python']}, mlx {info['mlx']}, mlx-lm {info['mlx-lm']}, "
        f"MLX device {info['device']}",
        f"blas: {info['blas']}",
        f"model: {info.get('model', 'the tiny llama (hidden 64, 2 layers, random weights)')}",
        f"load average at start {info['load_average_start']}, at the end {info['load_average']}",
        f"{args.rounds} rounds, medians; {args.max_tokens} tokens per request"
        + (
            f" (at several streams {args.max_tokens} x (1 ± {args.vary_tokens:g}), spread evenly)"
            if args.vary_tokens
            else ""
        )
        + f", {args.requests_per_stream} requests per stream",
        "",
        "| setup | "
        + " | ".join(f"{s} stream{'s' if s > 1 else ''} tok/s" for s in args.streams)
        + f" | {big} streams TTFT p50 / p99 ms | errors |",
        "|---|" + "---|" * (len(args.streams) + 2),
    ]
    for key, name in labels:
        rates = " | ".join(_fmt(med(f"{key}/{s}/tok_s")) for s in args.streams)
        p50, p99 = med(f"{key}/{big}/ttft_p50_ms"), med(f"{key}/{big}/ttft_p99_ms")
        errors = sum(sum(figures.series.get(f"{key}/{s}/errors", [])) for s in args.streams)
        requests = sum(sum(figures.series.get(f"{key}/{s}/requests", [])) for s in args.streams)
        error_text = "—" if key == "limit" else f"{errors:.0f} of {requests:.0f}"
        lines.append(f"| {name} | {rates} | {_fmt(p50, 1)} / {_fmt(p99, 1)} | {error_text} |")
    turns = [k for k in server_labels(figures, big) if f"{k}/turn2_over_turn1" in figures.series]
    if turns:  # not with --conversations 0
        lines += ["", "second turn of a 2,000-token conversation (time to first token):"]
    for key in turns:
        cached = med(f"{key}/turn2_cached_tokens")
        lines.append(
            f"  {key}: turn 1 {_fmt(med(f'{key}/turn1_ttft_ms'), 1)} ms, "
            f"turn 2 {_fmt(med(f'{key}/turn2_ttft_ms'), 1)} ms "
            f"({_fmt(cached)} cached tokens): {100 * med(f'{key}/turn2_over_turn1'):.0f}%"
        )
    if big > 1:  # measured in the multi-stream runs only
        lines += ["", f"CPU time per generated token at {big} streams (µs; cores kept busy):"]
    if "limit/cpu_us_per_token/workers" in figures.series:
        lines.append(
            f"  in-process BatchGenerator: {_fmt(med('limit/cpu_us_per_token/workers'), 1)} µs "
            f"({_fmt(med('limit/cores/workers'), 2)} cores)"
        )
    for key in server_labels(figures, big):
        if f"{key}/cpu_us_per_token/server" in figures.series:
            lines.append(
                f"  {key}: server process {_fmt(med(f'{key}/cpu_us_per_token/server'), 1)} µs "
                f"({_fmt(med(f'{key}/cores/server'), 2)} cores), its workers "
                f"{_fmt(med(f'{key}/cpu_us_per_token/workers'), 1)} µs "
                f"({_fmt(med(f'{key}/cores/workers'), 2)} cores); this client "
                f"{_fmt(med(f'{key}/cpu_us_per_token/client'), 1)} µs"
            )
    lines += ["", "targets (ratios within each round, medians):"]
    lines += ["  " + text for text in targets(args, figures)]
    return lines


def _paired(figures: Figures, a: str, b: str) -> float:
    from .client import median

    xs, ys = figures.series.get(a, []), figures.series.get(b, [])
    return median([x / y for x, y in zip(xs, ys, strict=False) if y])


def targets(args: argparse.Namespace, figures: Figures) -> list[str]:
    big = max(args.streams)
    gw = "mlx-gateway"
    out = []

    def check(text: str, value: float, ok: bool) -> None:
        out.append(f"[{'ok' if ok else 'MISS'}] {text}: {value:.2f}")

    if 1 in args.streams:
        r = figures.median(f"{gw}/1/pair_ratio")
        check("1 stream vs in-process stream_generate ≥ 0.95 (request pairs)", r, r >= 0.95)
    if big > 1:
        r = _paired(figures, f"{gw}/{big}/tok_s", f"limit/{big}/tok_s")
        check(f"{big} streams vs in-process BatchGenerator ≥ 0.92", r, r >= 0.92)
        if f"mlx_lm.server/{big}/tok_s" in figures.series:
            r = _paired(figures, f"{gw}/{big}/tok_s", f"mlx_lm.server/{big}/tok_s")
            check(f"{big} streams vs mlx_lm.server ≥ 2.5", r, r >= 2.5)
    errors = sum(sum(figures.series.get(f"{gw}/{s}/errors", [])) for s in args.streams)
    check("errors = 0", errors, errors == 0)
    r = _paired(figures, f"{gw}/{big}/ttft_p99_ms", f"{gw}/{big}/ttft_p50_ms")
    check(f"{big} streams TTFT p99 / p50 ≤ 3", r, r <= 3.0)
    if f"{gw}/turn2_over_turn1" in figures.series:  # not with --conversations 0
        r = figures.median(f"{gw}/turn2_over_turn1")
        check("second turn TTFT / first turn ≤ 0.25", r, r <= 0.25)
    if f"{gw}/cores/server" in figures.series:
        r = _paired(figures, f"{gw}/cores/server", f"{gw}/cores/workers")
        check("gateway cores / worker cores < 1 (the worker is the bottleneck)", r, r < 1.0)
    for label in server_labels(figures, big):
        if label.startswith(f"{gw}@"):
            if 1 in args.streams:
                r = figures.median(f"{label}/1/pair_ratio")
                check(f"{label}: 1 stream vs stream_generate ≥ 0.95 (request pairs)", r, r >= 0.95)
            if big > 1:
                r = _paired(figures, f"{label}/{big}/tok_s", f"limit/{big}/tok_s")
                check(f"{label}: {big} streams vs in-process BatchGenerator ≥ 0.92", r, r >= 0.92)
            r = _paired(figures, f"{label}/{big}/tok_s", f"{gw}/{big}/tok_s")
            out.append(f"[info] {label} / {gw} at {big} streams (paired): {r:.2f}")
    return out
