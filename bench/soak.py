"""A soak run (issue 33): mixed traffic for a long time, with faults, and a count of
every request's end.

    python -m bench.soak --minutes 20          # the issue's run
    python -m bench.soak --minutes 2 --clients 3   # a short one on a CPU box

The real ``mlx-gateway launch`` serves tiny random models of five kinds (a llama
chat model, a BERT embedder, a BERT cross-encoder reranker, a Whisper, a Soprano
speech model). ``--clients`` closed-loop clients send, in turn: OpenAI chat
(streamed and not), an OpenAI stream the client cuts after its first chunks,
Anthropic ``/v1/messages``, Ollama ``/api/chat``, embeddings, rerank, a
transcription of the fox clip and a speech synthesis. Meanwhile one worker is SIGKILLed every
``--kill-every`` seconds (models in turn), the config is reloaded (SIGHUP, the
embedder's entry changed) at half time, and once, at a third of the run, the chat
model's forward pass blocks while its process lives (the trap of
tests/e2e/test_stuck_step.py) until the stuck-step watchdog kills it.

Every request ends as one of: answered (a complete 2xx answer), a clear error (an
HTTP error with its API's error body, a whole answer that ends with that body after
its 200 and keep-alive spaces, or a stream's error event/line), cut by the
client (on purpose), or lost (anything else: a connection closed mid-answer, a
body that does not parse, a timeout). Lost must be 0. It prints per route the
counts and the p50/p99 latency, and the RSS of the gateway and of each model's
worker at the start (after a warm-up) and at the end.

Not a test: no figure here is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import yaml

from bench.client import percentile
from bench.servers import Server, launch_gateway, wait_model_ready

ANSWERED, CLEAR, CUT, LOST = "answered", "clear error", "cut by client", "lost"
OUTCOMES = (ANSWERED, CLEAR, CUT, LOST)
ROUTES = (
    "chat",
    "chat stream",
    "chat stream cut",
    "anthropic",
    "ollama chat",
    "embeddings",
    "rerank",
    "transcription",
    "speech",
)
MODELS = ("chat", "emb", "rerank", "asr", "tts")
FOX = Path(__file__).resolve().parent.parent / "tests" / "data" / "fox.ogg"
FOX_BYTES = FOX.read_bytes()
"""The clip every transcription request sends (read once, not per request)."""


@dataclass
class Tally:
    counts: dict[str, dict[str, int]] = field(
        default_factory=lambda: defaultdict(lambda: dict.fromkeys(OUTCOMES, 0))
    )
    latency: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    lost: list[str] = field(default_factory=list)

    def add(self, route: str, outcome: str, seconds: float, detail: str = "") -> None:
        self.counts[route][outcome] += 1
        if outcome == ANSWERED:
            self.latency[route].append(seconds)
        if outcome == LOST:
            self.lost.append(f"{route}: {detail}"[:300])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=20.0, help="how long (default 20)")
    parser.add_argument("--clients", type=int, default=6, help="concurrent clients (default 6)")
    parser.add_argument(
        "--kill-every", type=float, default=180.0, help="seconds between worker kills (180)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    return parser.parse_args(argv)


def build_models(workdir: Path) -> dict[str, Path]:
    from tests.fixtures.tiny_bert import build_tiny_bert
    from tests.fixtures.tiny_cross_encoder import build_tiny_cross_encoder
    from tests.fixtures.tiny_models import build_tiny_lm
    from tests.fixtures.tiny_soprano import build_tiny_soprano
    from tests.fixtures.whisper import build_tiny_whisper

    paths = {name: workdir / name for name in MODELS}
    build_tiny_lm(paths["chat"])
    build_tiny_bert(paths["emb"])
    build_tiny_cross_encoder(paths["rerank"])
    build_tiny_whisper(paths["asr"])
    build_tiny_soprano(paths["tts"])
    return paths


def entries(paths: dict[str, Path], hooks: Path, trap: Path, emb_concurrency: int) -> list[Any]:
    return [
        {
            "served_model_name": "chat",
            "model_path": str(paths["chat"]),
            "worker_env": {"PYTHONPATH": str(hooks), "BLOCK_FORWARD_FILE": str(trap)},
        },
        {
            "served_model_name": "emb",
            "model_path": str(paths["emb"]),
            "model_type": "embeddings",
            "max_concurrency": emb_concurrency,
        },
        {"served_model_name": "rerank", "model_path": str(paths["rerank"]), "model_type": "rerank"},
        {"served_model_name": "asr", "model_path": str(paths["asr"]), "model_type": "whisper"},
        {
            "served_model_name": "tts",
            "model_path": str(paths["tts"]),
            "model_type": "tts",
            "generate_kwargs": {"max_tokens": 8},  # the tiny Soprano never stops by itself
        },
    ]


def request_for(route: str, n: int) -> tuple[str, dict[str, Any]]:
    words = " ".join(random.choice(["cat", "dog", "sun", "tree", "road"]) for _ in range(8))
    chat = {"model": "chat", "messages": [{"role": "user", "content": f"{n} {words}"}]}
    match route:
        case "chat":
            return "/v1/chat/completions", {**chat, "max_tokens": 16}
        case "chat stream" | "chat stream cut":
            return "/v1/chat/completions", {**chat, "max_tokens": 48, "stream": True}
        case "anthropic":
            return "/v1/messages", {**chat, "max_tokens": 16}
        case "ollama chat":
            return "/api/chat", {**chat, "stream": False, "options": {"num_predict": 16}}
        case "embeddings":
            return "/v1/embeddings", {"model": "emb", "input": [words, f"{n}"]}
        case "transcription":
            return "/v1/audio/transcriptions", {"model": "asr"}
        case "speech":
            return "/v1/audio/speech", {
                "model": "tts",
                "input": f"{words}.",
                "voice": "alloy",
                "response_format": "wav",
            }
        case _:
            return "/v1/rerank", {"model": "rerank", "query": "cat", "documents": words.split()}


def judge_json(route: str, status: int, raw: bytes) -> tuple[str, str]:
    try:
        body = json.loads(raw)
    except ValueError:
        return LOST, f"{status}: unparsable body {raw[:120]!r}"
    # Every API's error object has an ``error`` (OpenAI's and Ollama's, Anthropic's
    # beside ``"type": "error"``): an HTTP error's body, or a whole answer's that
    # failed after its 200 and keep-alive spaces went out.
    error = body.get("error") if isinstance(body, dict) else None
    if status >= 400:
        return (CLEAR, "") if error else (LOST, f"{status} without an error body: {raw[:120]!r}")
    return (CLEAR, "") if error else (ANSWERED, "")


async def one(client: httpx.AsyncClient, route: str, n: int, tally: Tally) -> None:
    path, body = request_for(route, n)
    started = time.monotonic()
    outcome, detail = LOST, ""
    try:
        if route == "transcription":
            files = {"file": (FOX.name, FOX_BYTES, "audio/ogg")}
            reply = await client.post(path, data=body, files=files)
            outcome, detail = judge_json(route, reply.status_code, reply.content)
        elif not body.get("stream"):
            reply = await client.post(path, json=body)
            if route == "speech" and reply_is_audio(reply):
                outcome = ANSWERED
            else:
                outcome, detail = judge_json(route, reply.status_code, reply.content)
        else:
            async with client.stream("POST", path, json=body) as reply:
                if reply.status_code >= 400:
                    outcome, detail = judge_json(route, reply.status_code, await reply.aread())
                else:
                    outcome, detail = await read_stream(reply, route)
    except httpx.HTTPError as exc:
        outcome, detail = LOST, f"{type(exc).__name__}: {exc}"
    tally.add(route, outcome, time.monotonic() - started, detail)


def reply_is_audio(reply: httpx.Response) -> bool:
    """A whole audio answer: a 200 WAV with samples, as long as its header says, or
    a streamed one (size 0xFFFFFFFF) whose chunked body ended properly (a body cut
    short is an ``httpx`` error, counted as lost)."""
    content = reply.content
    size = int.from_bytes(content[4:8], "little")
    return (
        reply.status_code == 200
        and content[:4] == b"RIFF"
        and content[8:12] == b"WAVE"
        and size in (0xFFFFFFFF, len(content) - 8)
        and len(content) > 100
    )


async def read_stream(reply: httpx.Response, route: str) -> tuple[str, str]:
    chunks = 0
    async for line in reply.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return ANSWERED, ""
        if '"error"' in data:
            return CLEAR, ""
        chunks += 1
        if route == "chat stream cut" and chunks >= 3:
            return CUT, ""  # leaving the block closes the connection mid-stream
    return LOST, f"the stream ended without [DONE] after {chunks} chunks"


async def client_loop(port: int, deadline: float, tally: Tally, seed: int) -> None:
    rng = random.Random(seed)
    timeout = httpx.Timeout(120.0, connect=10.0)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=timeout) as client:
        n = 0
        while time.monotonic() < deadline:
            n += 1
            await one(client, rng.choice(ROUTES), n, tally)


def worker_pids(gateway: Server) -> dict[str, int]:
    """Served model → its worker's pid (loaded models only)."""
    models = gateway.get("/health").get("models", {})
    return {name: int(m["pid"]) for name, m in models.items() if m.get("pid")}


def rss(gateway: Server) -> dict[str, int]:
    out = {"gateway": gateway.process.memory_info().rss}
    for name, pid in worker_pids(gateway).items():
        try:
            process = psutil.Process(pid)
            out[name] = process.memory_info().rss + sum(
                c.memory_info().rss for c in process.children(recursive=True)
            )
        except psutil.Error:
            continue
    return out


async def chaos(
    gateway: Server, args: argparse.Namespace, env: dict[str, Any], done: list[str]
) -> None:
    """The faults, at their times; what was done goes into ``done``, for the report."""
    began = time.monotonic()
    total = args.minutes * 60
    plan = [(total / 3, "stall"), (total / 2, "reload")]
    plan += [(t, "kill") for t in _times(args.kill_every, total)]
    plan.sort()
    kills = 0
    for at, what in plan:
        await asyncio.sleep(max(0.0, began + at - time.monotonic()))
        now = round(time.monotonic() - began)
        if what == "kill":
            target = MODELS[kills % len(MODELS)]
            kills += 1
            pid = worker_pids(gateway).get(target)
            if pid:
                os.kill(pid, signal.SIGKILL)
                done.append(f"{now} s: killed {target}'s worker (pid {pid})")
        elif what == "reload":
            env["config"].write_text(yaml.safe_dump(env["changed"]))
            gateway.proc.send_signal(signal.SIGHUP)
            done.append(f"{now} s: config reloaded (emb's entry changed)")
        else:
            env["trap"].touch()
            await asyncio.sleep(env["stall_window"])
            env["trap"].unlink()
            done.append(f"{now} s: chat's forward pass blocked for {env['stall_window']:g} s")


def _times(every: float, total: float) -> list[float]:
    return [every * k for k in range(1, int(total // every) + 1) if every * k < total - 5]


def report(tally: Tally, before: dict[str, int], after: dict[str, int], faults: list[str]) -> str:
    lines = ["| route | sent | answered | clear error | cut by client | lost | p50 s | p99 s |"]
    lines.append("|---|--:|--:|--:|--:|--:|--:|--:|")
    totals = dict.fromkeys(OUTCOMES, 0)
    for route in ROUTES:
        counts = tally.counts[route]
        times = tally.latency[route]
        p50 = f"{percentile(times, 50):.2f}" if times else "-"
        p99 = f"{percentile(times, 99):.2f}" if times else "-"
        row = [counts[o] for o in OUTCOMES]
        lines.append(
            f"| {route} | {sum(row)} | " + " | ".join(map(str, row)) + f" | {p50} | {p99} |"
        )
        for o in OUTCOMES:
            totals[o] += counts[o]
    row = [totals[o] for o in OUTCOMES]
    lines.append(f"| **all** | {sum(row)} | " + " | ".join(map(str, row)) + " | | |")
    lines += ["", "| process | RSS at start | RSS at end |", "|---|--:|--:|"]
    for name in ("gateway", *MODELS):
        start, end = before.get(name), after.get(name)
        lines.append(f"| {name} | {_mib(start)} | {_mib(end)} |")
    lines += ["", "Faults:", *(f"* {f}" for f in faults)]
    if tally.lost:
        lines += ["", "Lost:", *(f"* {x}" for x in tally.lost[:20])]
    return "\n".join(lines)


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.0f} MiB"


async def soak(gateway: Server, args: argparse.Namespace, env: dict[str, Any]) -> str:
    deadline = time.monotonic() + args.minutes * 60
    tally = Tally()
    done: list[str] = []
    faults = asyncio.create_task(chaos(gateway, args, env, done))
    clients = [client_loop(gateway.port, deadline, tally, k) for k in range(args.clients)]
    await asyncio.gather(*clients)
    faults.cancel()
    await asyncio.sleep(2)  # the last restart settles before the end RSS
    return report(tally, env["rss_before"], rss(gateway), done) + _lost_line(tally)


def _lost_line(tally: Tally) -> str:
    lost = sum(c[LOST] for c in tally.counts.values())
    return f"\n\nlost: {lost} ({'ok' if lost == 0 else 'a finding'})"


def main(argv: list[str] | None = None) -> int:
    from tests.e2e.test_stuck_step import SITECUSTOMIZE

    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    hooks, trap = workdir / "hooks", workdir / "block-forward"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE)
    paths = build_models(workdir)
    server = {"log_level": "info", "hang_timeout": 10, "shutdown_grace": 5}
    gateway = launch_gateway(workdir, entries(paths, hooks, trap, 8), server, files="gateway")
    env: dict[str, Any] = {
        "trap": trap,
        "stall_window": 12.0,  # hang_timeout 10: the watchdog kills it once
        "config": workdir / "gateway.yaml",
    }
    config = yaml.safe_load(env["config"].read_text())
    env["changed"] = {**config, "models": entries(paths, hooks, trap, 4)}
    try:
        warm = {"chat": "chat", "emb": "embeddings", "asr": "transcription", "tts": "speech"}

        async def warm_up() -> None:
            url = f"http://127.0.0.1:{gateway.port}"
            async with httpx.AsyncClient(base_url=url, timeout=300) as client:
                for model in MODELS:  # every model loaded once before the start RSS
                    await one(client, warm.get(model, "rerank"), 0, Tally())

        asyncio.run(warm_up())
        for model in MODELS:
            wait_model_ready(gateway, model)
        env["rss_before"] = rss(gateway)
        print(f"soak: {args.minutes:g} min, {args.clients} clients, {os.cpu_count()} CPUs")
        table = asyncio.run(soak(gateway, args, env))
        print(table)
        if args.json:
            args.json.write_text(json.dumps({"report": table}))
    finally:
        gateway.stop()
        print(f"logs in {workdir}" if args.keep else "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
