"""Fairness: what a person feels beside batch work (issues 44 and 53).

    uv run python -m bench.fairness                        # about 6 minutes on 2 cores
    uv run python -m bench.fairness --phase 60 --long-tokens 7000 --json out.json

One gateway (the real ``mlx-gateway launch``) serves SmolLM2-135M-Instruct in float32
and all-MiniLM-L6-v2 (:mod:`bench.fairness_models`: both from wheels, nothing
downloaded). The run is a row of phases of ``--phase`` seconds each:

* **interactive alone**: a one-line chat request (streamed, ``--chat-tokens``
  tokens) every ``--every`` seconds, one at a time: its time to first token and the
  time between its tokens;
* **batch alone**, three kinds: a batch app's long prompts on the same model
  (``--long-tokens`` each, every one new to the prompt cache, one in flight,
  ``service_tier: flex``), an embeddings flood on the other model (64 sentences a
  request, two in flight, ``flex``), and both: their throughput (prompt tokens/s
  read, inputs/s embedded);
* **beside**: each of the three batch kinds again with the interactive requests.

Before the phases it measures one pass of each batch model alone: a decode step of
the language model (its median time between tokens alone: one pass over its
weights) and one full step of the embeddings model (a request of as many sentences
as one step takes, ``--embed-batch-tokens``). The *floor* of a case is the
interactive time to first token alone plus one pass of each batch model in it: the
step under way when the person's request arrives finishes first.

It prints, for each case, the interactive time to first token (median, p95) against
alone and against the floor, the time between tokens (median, p95) against alone,
and the batch work's throughput against the same work alone. Targets (issue 53):
time to first token ≤ the floor + 20 %, time between tokens ≤ 1.5x alone, batch
throughput ≥ 0.8 of alone beside one kind of batch work and ≥ 0.5 beside both. Batch
requests are made batch by ``service_tier: flex`` (a key's ``priority: batch`` does
the same); the interactive ones have the default priority. Each verdict also gives
the share of the phase the person's requests were in flight (``busy``) and what that
leaves the batch work where both share one machine's compute: with the person's
steps at most 1.5 times as long as alone, batch work gets at most a third of the
machine while a person's request runs, so it keeps at most ``1 - busy + busy / 3``
of alone (``bench.slice_cost`` measures that on a CPU no forward pass, fused with the
person's or not, carries more). On Linux, OpenBLAS (when
installed) is preloaded as the gateway preloads it into its workers.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .client import chat_body
from .fairness_models import EMBED_SERVED, LM_SERVED, long_prompts, minilm, smollm2_f32
from .lm_report import machine
from .servers import launch_gateway, reexec_with_openblas, wait_model_ready
from .slice_cost import kept

QUESTION = "Name the countries of Europe and their capitals, one pair per line."
"""A question whose answer runs past ``--chat-tokens``: every answer as long."""
SENTENCES = [f"Sentence {i} of the photo tagger's index: a cat on a red sofa." for i in range(64)]
KINDS = ("prefill", "embeddings", "both")
CONTENT = re.compile(r'"content": ?"[^"]')
STEP_TOKENS = 20
"""Padded tokens per sentence of :data:`SENTENCES` (MiniLM's tokenizer, with the
special tokens): a full step of ``--embed-batch-tokens`` takes that many fewer."""
PROGRESS = re.compile(r": prefill (\d+)/(\d+) tokens")
USAGE = re.compile(r'"prompt_tokens": ?(\d+)')
KEEPALIVE = 0.5
"""The gateway's ``stream_keepalive`` here: a long prompt's progress this often."""
LABELS = {
    "prefill": "long prefill, same model",
    "embeddings": "embeddings flood, other model",
    "both": "both",
}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.fairness", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--phase", type=float, default=40.0, help="seconds per phase (default 40)")
    parser.add_argument(
        "--every", type=float, default=2.0, help="seconds between interactive requests"
    )
    parser.add_argument(
        "--chat-tokens", type=int, default=16, help="tokens per interactive answer (default 16)"
    )
    parser.add_argument("--long-tokens", type=int, default=3000, help="tokens per batch prompt")
    parser.add_argument(
        "--embed-batch-tokens",
        type=int,
        default=512,
        help="the embeddings model's max_batch_tokens: how long one of its steps is, "
        "which a paused worker finishes first (default 512)",
    )
    parser.add_argument(
        "--linger",
        type=float,
        default=0.0,
        help="the language model's batch_slice_linger: seconds its batch prompt's slices "
        "stay bounded after a person's answer (default 0)",
    )
    parser.add_argument(
        "--cases",
        default=",".join(KINDS),
        help=f"the cases to run, of {','.join(KINDS)} (default all)",
    )
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "mlx-gateway-bench")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    args = parser.parse_args(argv)
    args.cases = [case.strip() for case in args.cases.split(",") if case.strip()]
    if unknown := [case for case in args.cases if case not in KINDS]:
        parser.error(f"--cases: unknown {', '.join(unknown)}; choose of {', '.join(KINDS)}")
    return args


@dataclass
class Phase:
    """What one phase measured."""

    ttft: list[float] = field(default_factory=list)
    tbt: list[float] = field(default_factory=list)
    """Seconds between two of the interactive answers' content events, every one."""
    busy: float = 0.0
    """Seconds an interactive request was in flight (sent to its last byte)."""
    prompt_tokens: int = 0
    inputs: int = 0
    reading: int = 0
    """Prompt tokens the long prompt under way has read (its latest progress)."""
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)

    def rate(self, kind: str) -> float:
        """The batch work's throughput: prompt tokens/s, inputs/s, or both summed
        as shares of their alone figures by the caller."""
        done = self.prompt_tokens if kind == "prefill" else self.inputs
        return done / self.seconds if self.seconds else 0.0


class Bench:
    def __init__(self, args: argparse.Namespace, port: int, prompts: list[str]) -> None:
        self.args = args
        self.base = f"http://127.0.0.1:{port}"
        self.port = port
        self.prompts = prompts
        self.next_prompt = 0
        self.http = httpx.AsyncClient(timeout=600)

    async def interactive(self, phase: Phase, until: float) -> None:
        messages = [{"role": "user", "content": QUESTION}]
        body = json.loads(chat_body(LM_SERVED, messages, self.args.chat_tokens))
        while time.monotonic() < until:
            started = time.monotonic()
            times: list[float] = []
            try:
                times = await self.timed_chat(body)
            except (httpx.HTTPError, RuntimeError) as exc:
                phase.errors.append(f"{type(exc).__name__}: {exc}"[:200])
            else:
                if not times:
                    phase.errors.append("no token")
            phase.busy += time.monotonic() - started
            if times:
                phase.ttft.append(times[0] - started)
                phase.tbt += [b - a for a, b in itertools.pairwise(times)]
            await asyncio.sleep(max(0.0, self.args.every - (time.monotonic() - started)))

    async def timed_chat(self, body: dict[str, Any]) -> list[float]:
        """Stream one chat request: the time of each event that carries content."""
        times: list[float] = []
        async with self.http.stream("POST", f"{self.base}/v1/chat/completions", json=body) as reply:
            if reply.status_code != 200:
                raise RuntimeError(f"HTTP {reply.status_code}: {(await reply.aread())[:200]!r}")
            async for line in reply.aiter_lines():
                if line.startswith("data: {") and CONTENT.search(line):
                    times.append(time.monotonic())
        return times

    async def one_pass(self) -> tuple[float, float]:
        """Seconds of one pass of each batch model alone: the language model's median
        time between tokens, and the median time of one full embeddings step."""
        alone = Phase()
        await self.interactive(alone, time.monotonic() + 6 * self.args.every)
        lm = statistics.median(alone.tbt)
        step = SENTENCES[: max(1, self.args.embed_batch_tokens // STEP_TOKENS)]
        seconds = []
        for _ in range(9):
            started = time.monotonic()
            reply = await self.http.post(
                f"{self.base}/v1/embeddings", json={"model": EMBED_SERVED, "input": step}
            )
            reply.raise_for_status()
            seconds.append(time.monotonic() - started)
        return lm, statistics.median(seconds)

    async def long_prompts(self, phase: Phase) -> None:
        """One long prompt after another. Streamed, so that the keep-alive comments
        (``: prefill 1024/3000 tokens``, every ``stream_keepalive``) tell how far a
        prompt got when the phase ends: its part counts too."""
        while True:
            text = self.prompts[self.next_prompt % len(self.prompts)]
            self.next_prompt += 1
            body = {
                "model": LM_SERVED,
                "messages": [{"role": "user", "content": text}],
                "max_tokens": 4,
                "temperature": 0.0,
                "service_tier": "flex",
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            phase.reading = 0
            try:
                async with self.http.stream(
                    "POST", f"{self.base}/v1/chat/completions", json=body
                ) as reply:
                    if reply.status_code != 200:
                        phase.errors.append((await reply.aread()).decode()[:200])
                        continue
                    read = 0
                    async for line in reply.aiter_lines():
                        if match := PROGRESS.match(line):
                            phase.reading = int(match[1])
                        elif match := USAGE.search(line):
                            read = int(match[1])
                    phase.prompt_tokens += read
                    phase.reading = 0
            except asyncio.CancelledError:
                phase.prompt_tokens += phase.reading  # what the cut prompt read
                raise

    async def flood(self, phase: Phase) -> None:
        while True:
            reply = await self.http.post(
                f"{self.base}/v1/embeddings",
                json={
                    "model": EMBED_SERVED,
                    "input": SENTENCES,
                    "encoding_format": "base64",
                    "service_tier": "flex",
                },
            )
            if reply.status_code != 200:
                phase.errors.append(reply.text[:200])
                continue
            phase.inputs += len(reply.json()["data"])

    async def phase(self, kind: str | None, interactive: bool) -> Phase:
        """One phase: batch work of ``kind`` (``None``: none) with or without the
        interactive requests; only requests that ended inside it are counted."""
        phase = Phase()
        started = time.monotonic()
        until = started + self.args.phase
        batch: list[asyncio.Task[None]] = []
        if kind in ("prefill", "both"):
            batch.append(asyncio.create_task(self.long_prompts(phase)))
        if kind in ("embeddings", "both"):
            batch += [asyncio.create_task(self.flood(phase)) for _ in range(2)]
        if interactive:
            await asyncio.sleep(min(1.0, self.args.every))  # the batch work is under way
            await self.interactive(phase, until)
        await asyncio.sleep(max(0.0, until - time.monotonic()))
        for task in batch:
            task.cancel()
        await asyncio.gather(*batch, return_exceptions=True)
        phase.seconds = time.monotonic() - started
        await asyncio.sleep(2.0)  # cancelled requests leave their workers
        return phase

    async def warm_up(self) -> None:
        warm = Phase()
        await self.interactive(warm, time.monotonic() + 0.1)
        await asyncio.wait_for(self.long_prompts_once(), timeout=600)
        task = asyncio.create_task(self.flood(warm))
        await asyncio.sleep(3.0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def long_prompts_once(self) -> None:
        phase = Phase()
        task = asyncio.create_task(self.long_prompts(phase))
        while not phase.prompt_tokens and not phase.errors:
            await asyncio.sleep(0.2)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def measure(
    args: argparse.Namespace, port: int, prompts: list[str]
) -> tuple[dict[str, Phase], dict[str, float]]:
    bench = Bench(args, port, prompts)
    try:
        await bench.warm_up()
        lm_pass, embed_step = await bench.one_pass()
        passes = {"prefill": lm_pass, "embeddings": embed_step, "both": lm_pass + embed_step}
        phases = {"interactive alone": await bench.phase(None, True)}
        for kind in args.cases:
            print(f"phase: {LABELS[kind]}", file=sys.stderr)
            phases[f"{kind} alone"] = await bench.phase(kind, False)
            phases[f"{kind} beside"] = await bench.phase(kind, True)
        return phases, passes
    finally:
        await bench.http.aclose()


def p95(values: list[float]) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(
    phases: dict[str, Phase],
    passes: dict[str, float],
    info: dict[str, Any],
    args: argparse.Namespace,
) -> list[str]:
    alone = phases["interactive alone"]
    base, base_tbt = median(alone.ttft), median(alone.tbt)
    ms = 1000
    lines = [
        f"machine: {info['cpu']}, {info['cores']} cores, {info['device']}, {info['system']}; "
        f"mlx {info['mlx']}, mlx-lm {info['mlx-lm']}; BLAS: {info['blas']}; "
        f"load average at start {info['load_average']}",
        f"phases of {args.phase:g} s; interactive: one request every {args.every:g} s, "
        f"{args.chat_tokens} tokens; batch prompts of about {args.long_tokens} tokens; "
        f"batch_slice_linger {args.linger:g} s",
        f"one pass alone: the language model {passes['prefill'] * ms:.0f} ms (a decode step), "
        f"the embeddings model {passes['embeddings'] * ms:.0f} ms (a full step)",
        "",
        "| case | TTFT median | p95 | x alone | floor | x floor | TBT median | p95 | x alone "
        "| batch throughput | x alone |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        f"| alone | {base * ms:.0f} ms | {p95(alone.ttft) * ms:.0f} ms | 1.00 | - | - "
        f"| {base_tbt * ms:.0f} ms | {p95(alone.tbt) * ms:.0f} ms | 1.00 | - | - |",
    ]
    verdicts = []
    for kind in args.cases:
        beside, solo = phases[f"{kind} beside"], phases[f"{kind} alone"]
        ttft, tbt = median(beside.ttft), median(beside.tbt)
        floor = base + passes[kind]
        if kind == "both":
            shares = [
                beside.rate(k) / solo.rate(k) for k in ("prefill", "embeddings") if solo.rate(k)
            ]
            share = min(shares) if shares else float("nan")
            what = (
                f"{beside.rate('prefill'):.0f} tok/s + {beside.rate('embeddings'):.1f} inputs/s "
                f"(alone {solo.rate('prefill'):.0f} + {solo.rate('embeddings'):.1f})"
            )
        else:
            share = beside.rate(kind) / solo.rate(kind) if solo.rate(kind) else float("nan")
            unit = "prompt tok/s" if kind == "prefill" else "inputs/s"
            what = f"{beside.rate(kind):.1f} {unit} (alone {solo.rate(kind):.1f})"
        lines.append(
            f"| beside {LABELS[kind]} | {ttft * ms:.0f} ms | {p95(beside.ttft) * ms:.0f} ms "
            f"| {ttft / base:.2f} | {floor * ms:.0f} ms | {ttft / floor:.2f} "
            f"| {tbt * ms:.0f} ms | {p95(beside.tbt) * ms:.0f} ms | {tbt / base_tbt:.2f} "
            f"| {what} | {share:.2f} |"
        )
        least = 0.5 if kind == "both" else 0.8
        busy = beside.busy / beside.seconds if beside.seconds else float("nan")
        # While a request runs, its steps at most 1.5 times as far apart as alone leave
        # the batch work a third of the machine (bench.slice_cost: on a CPU no pass
        # carries more of it beside the person's token); the rest of the time, all.
        bound = kept(busy)
        verdicts.append(
            f"{LABELS[kind]}: TTFT {ttft / floor:.2f}x the floor "
            f"({'meets' if ttft / floor <= 1.2 else 'misses'} ≤ 1.2), "
            f"TBT {tbt / base_tbt:.2f}x alone ({'meets' if tbt / base_tbt <= 1.5 else 'misses'} "
            f"≤ 1.5), batch {share:.2f} of alone "
            f"({'meets' if share >= least else 'misses'} ≥ {least}); the person's requests "
            f"ran {busy:.0%} of the phase, so on a machine both share, batch work keeps at "
            f"most {bound:.2f} with TBT ≤ 1.5x"
        )
    errors = sum(len(p.errors) for p in phases.values())
    return [*lines, "", *verdicts, f"errors: {errors}"]


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    reexec_with_openblas("bench.fairness", argv)
    args = parse_args(argv)
    info = machine()
    args.work.mkdir(parents=True, exist_ok=True)
    lm, embed = smollm2_f32(args.work), minilm()
    prompts = long_prompts(lm, args.long_tokens)
    entries: list[dict[str, Any]] = [
        {
            "served_model_name": LM_SERVED,
            "model_path": str(lm),
            "model_type": "lm",
            "batch_slice_linger": args.linger,
        },
        {
            "served_model_name": EMBED_SERVED,
            "model_path": str(embed),
            "model_type": "embeddings",
            "max_batch_tokens": args.embed_batch_tokens,
        },
    ]
    for entry in entries:
        entry.update(on_demand=False, idle_timeout=0)
    with tempfile.TemporaryDirectory(prefix="fairness-") as tmp:
        server = {"stream_keepalive": KEEPALIVE}
        gateway = launch_gateway(Path(tmp), entries, server, name="the gateway")
        try:
            for served in (LM_SERVED, EMBED_SERVED):
                wait_model_ready(gateway, served, 300)
            phases, passes = asyncio.run(measure(args, gateway.port, prompts))
        finally:
            gateway.stop()
    lines = report(phases, passes, info, args)
    print("\n".join(lines))
    if args.json:
        figures = {name: vars(phase) for name, phase in phases.items()}
        out = {"machine": info, "passes": passes, "phases": figures}
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
