"""The report of ``bench.swap``: medians, paired ratios and the targets."""

from __future__ import annotations

import argparse
import os
import platform
import statistics

from .servers import PRELOADED

SPARE_TARGET = 0.3
PLAIN_TARGET = 0.9
"""Unloaded model → first token, as a share of a fresh ``python -c`` doing the same."""


def bytecode_state() -> str:
    """How this environment treats bytecode (what the plain fresh run meets)."""
    if os.environ.get("PYTHONPYCACHEPREFIX"):
        return "cached in PYTHONPYCACHEPREFIX"
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        return "not written (PYTHONDONTWRITEBYTECODE), compiled at every start"
    return "written as usual"


def holds(ok: bool) -> str:
    return "holds" if ok else "does not hold"


def report(args: argparse.Namespace, figures: dict[str, list[float]]) -> list[str]:
    med = {name: statistics.median(values) for name, values in figures.items()}
    lines = [
        "",
        f"machine: {platform.machine()} {platform.system()}, {os.cpu_count()} cores; "
        f"blas: {os.environ.get(PRELOADED) or 'the wheel BLAS, its own'}",
        f"model: random llama, hidden {args.hidden}, {args.layers} layers, float32; "
        f"{args.rounds} rounds; weights "
        + ("evicted from the page cache before every start" if args.cold else "in the page cache"),
    ]
    if "a/fresh" in figures:
        fresh, spare, plain = (figures[k] for k in ("a/fresh", "a/gateway+spare", "a/gateway"))
        warm = figures["a/fresh_warm"]
        paired = statistics.median(s / f for s, f in zip(spare, fresh, strict=True))
        unspared = statistics.median(p / f for p, f in zip(plain, fresh, strict=True))
        unspared_warm = statistics.median(p / f for p, f in zip(plain, warm, strict=True))
        prefill_share = statistics.median(
            p / f for p, f in zip(figures["a/fresh_prefill"], fresh, strict=True)
        )
        worker = [
            k for k in med if k.startswith("a/worker_") and not k.startswith("a/worker_read ahead")
        ]
        accounted = sum(med[k] for k in worker)
        lines += [
            "(a) unloaded model → first token, seconds (median):",
            f"  fresh python -c (import, load, 1 token): {med['a/fresh']:.2f} "
            f"(import {med['a/fresh_import']:.2f}, load {med['a/fresh_load']:.2f}, "
            f"prefill and first step {med['a/fresh_prefill']:.2f}; bytecode: "
            f"{bytecode_state()})",
            f"  the same with its bytecode cached:       {med['a/fresh_warm']:.2f} "
            f"(import {med['a/fresh_warm_import']:.2f})",
            f"  gateway with a spare worker:              {med['a/gateway+spare']:.2f} "
            f"(the idle spare's RSS: {med['a/spare_rss_mib']:.0f} MiB)",
            f"  gateway without spares:                   {med['a/gateway']:.2f} (the worker's "
            + ", ".join(f"{k.removeprefix('a/worker_')} {med[k]:.2f}" for k in worker)
            + f"; the rest {med['a/gateway'] - accounted:.2f}: spawn, handshake, prefill, relay)",
            f"  the prefill's share of the fresh first token: {prefill_share:.0%} (where it "
            "dominates, no start-up saving can move the ratios far from 1)",
            f"  paired ratio gateway+spare / fresh: {paired:.2f} "
            f"(target ≤ {SPARE_TARGET}: {holds(paired <= SPARE_TARGET)})",
            f"  paired ratio without spares / fresh: {unspared:.2f} "
            f"(target ≤ {PLAIN_TARGET}: {holds(unspared <= PLAIN_TARGET)})",
            f"  paired ratio without spares / fresh with cached bytecode: {unspared_warm:.2f}",
        ]
        if "a/worker_read ahead MiB" in med:
            lines.append(
                f"  the worker read {med['a/worker_read ahead MiB']:,.0f} MiB of weights ahead "
                f"in {med['a/worker_read ahead']:.2f} s, while it imported its backend"
            )
        if "a/also" in figures:
            lines += also_lines(args, figures, med)
        if "a/gateway_unread" in figures:
            unread = figures["a/gateway_unread"]
            gain = statistics.median(p / u for p, u in zip(plain, unread, strict=True))
            lines += [
                f"  gateway without spares, read-ahead off:   {med['a/gateway_unread']:.2f}",
                f"  paired ratio read-ahead on / off: {gain:.2f}; read-ahead off / fresh: "
                + f"{statistics.median(u / f for u, f in zip(unread, fresh, strict=True)):.2f}",
            ]
    if "b/disk" in figures:
        speedup = statistics.median(
            n / d for d, n in zip(figures["b/disk"], figures["b/nodisk"], strict=True)
        )
        lines += [
            f"(b) turn 2 of a ~{args.context_tokens}-token conversation after eviction, "
            "time to first token, seconds (median):",
            f"  with the disk tier:    {med['b/disk']:.3f} "
            f"({int(med['b/disk_cached_tokens'])} prompt tokens from the cache)",
            f"  without (re-prefill):  {med['b/nodisk']:.3f} "
            f"({int(med['b/nodisk_cached_tokens'])} from the cache)",
            f"  paired speed-up: {speedup:.1f} times (target: at least 5)",
        ]
    return lines


def also_lines(
    args: argparse.Namespace, figures: dict[str, list[float]], med: dict[str, float]
) -> list[str]:
    """(a)'s lines for the gateways of ``--also-checkout``, paired with this one's."""
    fresh = figures["a/fresh"]

    def paired(a: str, b: list[float]) -> float:
        return statistics.median(x / y for x, y in zip(figures[a], b, strict=True))

    phases = [k for k in med if k.startswith("a/also_worker_") and "read ahead" not in k]
    return [
        f"  {args.also_checkout}, with a spare worker: {med['a/also+spare']:.2f}; "
        f"without spares: {med['a/also']:.2f} (the worker's "
        + ", ".join(f"{k.removeprefix('a/also_worker_')} {med[k]:.2f}" for k in phases)
        + ")",
        f"  its paired ratios / fresh: with a spare {paired('a/also+spare', fresh):.2f}, "
        f"without {paired('a/also', fresh):.2f}",
        f"  paired ratio this / {args.also_checkout.name}: with a spare "
        f"{paired('a/gateway+spare', figures['a/also+spare']):.2f}, without "
        f"{paired('a/gateway', figures['a/also']):.2f}",
    ]
