"""Model swaps: the first token of an unloaded model, and a long conversation resumed
after its model was evicted.

    uv run python -m bench.swap                 # a few minutes on 2 cores
    uv run python -m bench.swap --rounds 5 --json out.json
    uv run python -m bench.swap --parts a     # only the first token: under a minute

On a random llama built here (``--hidden``/``--layers``; default hidden 384, 16
layers, float32, 16k positions), with ``mlx-gateway launch`` (the real command):

(a) *Unloaded model → first token*, paired per round, the order alternating:

* ``fresh``: ``python -c "import mlx_lm; load; stream_generate(max_tokens=1)"``, the
  wall time from starting the interpreter to its first token, with its phases
  (import, load, prefill and first step: the prefill's share tells a model whose
  prefill dominates, where no start-up saving moves the ratios far from 1);
* ``fresh-warm``: the same with its compiled bytecode cached (``PYTHONPYCACHEPREFIX``,
  warmed once): where the environment sets ``PYTHONDONTWRITEBYTECODE``, the plain
  ``fresh`` run compiles every module it imports, and the gateway's workers do not
  (``server.bytecode_cache``), so both baselines are reported;
* ``gateway+spare``: a streaming chat request to the unloaded model of a gateway with
  ``server.spare_workers`` and a ready spare: from sending the request to the first
  content chunk (the load happens inside);
* ``gateway``: the same on a gateway without spares (a new worker process), with
  the phases of the worker's start from its ``ready:`` log line.

With ``--cold`` the model's weight files are dropped from the page cache
(``posix_fadvise``, Linux) before every start, as after a reboot or under memory
pressure, and (a) adds ``gateway-unread``: the gateway without spares whose worker
does not read its weights ahead while it imports its backend (``worker_env``
``MLX_GATEWAY_READ_AHEAD=0``), paired with the one that does. Give it a model whose
weights take a while to read: ``--cold --hidden 1536 --layers 12`` is about 0.9 GiB.

(b) *A ~8k-token conversation resumed after eviction*: turn 1 (the long user message)
is answered, the model is unloaded (``POST /v1/models/{m}/unload``, as an eviction
stops it), loaded again (``POST …/load``), and turn 2 (turn 1, the answer, a short
question) is sent: its time to first token, for a model entry with
``prompt_cache_dir`` (the disk tier) and for the same model without. Each round uses
a new conversation.

On Linux, OpenBLAS (when installed) is preloaded here (so into the ``fresh`` runs) as
the gateway preloads it into its workers. The report gives per-round figures and
medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from mlx_gateway.workers.runtime.prefetch import READ_AHEAD_ENV

from .client import chat_body, stream_chat, stream_text
from .lm_workload import SENTENCES
from .servers import Server, launch_gateway, reexec_with_openblas
from .swap_report import report

FRESH = """
import sys, time
import mlx_lm
imported = time.time()
model, tokenizer = mlx_lm.load(sys.argv[1])
loaded = time.time()
for response in mlx_lm.stream_generate(model, tokenizer, sys.argv[2], max_tokens=1):
    break
print("first-token", imported, loaded, time.time(), flush=True)
"""
"""The fresh run: its first token, after printing when the import and the load ended
(wall clock), so the report can give the share of each phase."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.swap", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--hidden", type=int, default=384, help="the model's hidden size")
    parser.add_argument("--layers", type=int, default=16, help="the model's layers")
    parser.add_argument(
        "--context-tokens", type=int, default=8000, help="tokens of the conversation's turn 1"
    )
    parser.add_argument(
        "--parts",
        default="ab",
        help="which measurements: a (first token), b (resume after eviction); default ab",
    )
    parser.add_argument(
        "--cold",
        action="store_true",
        help="(a) with the weights out of the page cache before every start (Linux)",
    )
    parser.add_argument(
        "--also-checkout",
        type=Path,
        metavar="DIR",
        help="(a) also a gateway with a spare and one without run from another clone of "
        "this repo (its .venv, made with uv sync), in the same rounds: two versions side by side",
    )
    parser.add_argument("--no-openblas", action="store_true", help="do not preload OpenBLAS here")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs)")
    return parser.parse_args(argv)


def build_model(out: Path, hidden: int, layers: int) -> Path:
    from tests.fixtures.tiny_models import build_tiny_lm

    return build_tiny_lm(out, hidden=hidden, layers=layers, context_length=16384)


def start_gateway(
    workdir: Path,
    name: str,
    server: dict[str, Any],
    models: list[dict],
    checkout: Path | None = None,
) -> Server:
    return launch_gateway(
        workdir,
        models,
        {"log_level": "info", "shutdown_grace": 10, **server},
        name,
        name,
        checkout=checkout,
    )


def post(server: Server, path: str, timeout: float = 300.0) -> Any:
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}{path}", data=b"", method="POST"
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def wait_for(predicate: Any, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


def spare_ready(server: Server) -> bool:
    return any(spare["ready"] for spare in server.get("/health").get("spares", []))


def fresh_first_token(
    model: Path, prompt: str, bytecode: Path | None = None
) -> tuple[float, dict[str, float]]:
    """The fresh run's first token, in seconds, and its phases: the interpreter and
    ``import mlx_lm``, the load, the prefill and first step. ``bytecode``: a folder
    for its compiled bytecode (``PYTHONPYCACHEPREFIX``), else the environment as it
    is (where ``PYTHONDONTWRITEBYTECODE`` is set, every run compiles its imports)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if bytecode is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(bytecode)
    wall = time.time()
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", FRESH, str(model), prompt],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    elapsed = time.perf_counter() - started
    proc.wait(60)
    if b"first-token" not in line:
        raise RuntimeError("the fresh run did not produce a token")
    imported, loaded, first = (float(x) for x in line.split()[1:4])
    phases = {"import": imported - wall, "load": loaded - imported, "prefill": first - loaded}
    return elapsed, phases


def gateway_first_token(server: Server, model: str, prompt: str) -> float:
    result = asyncio.run(
        stream_chat(server.port, chat_body(model, [{"role": "user", "content": prompt}], 4))
    )
    if result.error or result.ttft is None:
        raise RuntimeError(f"{server.name}: {result.error or 'no token'}\n{server.log()}")
    return result.ttft


READY = re.compile(r"ready: .* loaded in [\d.]+ s \((?P<phases>[^;)]*)(?P<ahead>;[^)]*)?\)")
PHASE = re.compile(r"(?P<name>[a-z ]+?) (?P<seconds>[\d.]+) s")
AHEAD = re.compile(r"weights read ahead (?P<read>[\d,.]+) of [\d,.]+ MiB in (?P<seconds>[\d.]+) s")


def worker_phases(server: Server) -> dict[str, float]:
    """The phases of the last worker start, from its ``ready:`` log line, and what
    its read-ahead of the weights did (``read ahead MiB``, ``read ahead``: seconds)."""
    found = list(READY.finditer(server.log_path.read_text(errors="replace")))
    if not found:
        return {}
    last = found[-1]
    phases = {m["name"].strip(): float(m["seconds"]) for m in PHASE.finditer(last["phases"])}
    if last["ahead"] and (ahead := AHEAD.search(last["ahead"])):
        phases["read ahead MiB"] = float(ahead["read"].replace(",", ""))
        phases["read ahead"] = float(ahead["seconds"])
    return phases


def evict_weights(model: Path) -> None:
    """Drop the model's weight files from the page cache (Linux), so that the next
    start reads them from the disk as after a reboot or under memory pressure."""
    for path in sorted(model.rglob("*.safetensors")):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def long_text(index: int, words: int) -> str:
    pool = " ".join(SENTENCES).split()
    return f"Conversation {index}: " + " ".join(
        f"{pool[(i * 7 + index) % len(pool)]}" for i in range(words)
    )


def resumed_ttft(server: Server, model: str, index: int, words: int) -> tuple[float, int]:
    """Turn 1, unload, load, turn 2: turn 2's time to first token and its cached tokens."""
    first = [{"role": "user", "content": long_text(index, words)}]
    result = asyncio.run(stream_chat(server.port, chat_body(model, first, 8), keep_body=True))
    if result.error:
        raise RuntimeError(f"{model} turn 1: {result.error}\n{server.log()}")
    answer = stream_text(result.body or b"")
    post(server, f"/v1/models/{model}/unload")
    post(server, f"/v1/models/{model}/load")
    second = [
        *first,
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "And in one word?"},
    ]
    again = asyncio.run(stream_chat(server.port, chat_body(model, second, 4)))
    if again.error or again.ttft is None:
        raise RuntimeError(f"{model} turn 2: {again.error}\n{server.log()}")
    return again.ttft, again.cached_tokens


def words_for(model: Path, tokens: int) -> int:
    """How many words of :func:`long_text` make about ``tokens`` prompt tokens."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model))

    def count(words: int) -> int:
        message = [{"role": "user", "content": long_text(0, words)}]
        text = tokenizer.apply_chat_template(message, tokenize=False, add_generation_prompt=True)
        return len(tokenizer.encode(text, add_special_tokens=False))

    words = max(tokens // 4, 1)
    for _ in range(4):
        words = max(min(int(words * tokens / count(words)), 4 * tokens), 1)
    return words


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.cold and not hasattr(os, "posix_fadvise"):
        raise SystemExit("--cold needs posix_fadvise (Linux): this system has none")
    if not args.no_openblas:
        reexec_with_openblas("bench.swap", argv)
    workdir = Path(tempfile.mkdtemp(prefix="bench-swap-"))
    model = build_model(workdir / "model", args.hidden, args.layers)
    words = words_for(model, args.context_tokens) if "b" in args.parts else 0
    figures: dict[str, list[float]] = {}

    def add(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)
        print(f"  {name}: {value:.3f}", flush=True)

    entry = {"model_path": str(model), "on_demand": True, "idle_timeout": 0}
    servers: list[Server] = []
    try:
        if "a" in args.parts:
            first_token_rounds(args, workdir, model, entry, servers, add, figures)
        if "b" in args.parts:
            resume_rounds(args, workdir, entry, words, servers, add)
    finally:
        for server in servers:
            server.stop()
    lines = report(args, figures)
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps({"figures": figures, "report": lines}, indent=2))
    if not args.keep:
        import shutil

        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"work folder: {workdir}")
    return 0


def first_token_rounds(
    args: argparse.Namespace,
    workdir: Path,
    model: Path,
    entry: dict[str, Any],
    servers: list[Server],
    add: Any,
    figures: dict[str, list[float]],
) -> None:
    """(a): fresh python, a gateway with a spare, one without, in alternating order."""
    print("(a) unloaded model → first token", flush=True)
    named = [{**entry, "served_model_name": "m"}]
    spare = start_gateway(workdir, "gateway-spare", {"spare_workers": True}, named)
    servers.append(spare)
    plain = start_gateway(workdir, "gateway-plain", {}, named)
    servers.append(plain)
    # The same two gateways run from another checkout (--also-checkout).
    also: dict[str, Server] = {}
    if args.also_checkout is not None:
        spares = {"spare_workers": True}
        also["also-spare"] = start_gateway(workdir, "also-spare", spares, named, args.also_checkout)
        also["also-plain"] = start_gateway(workdir, "also-plain", {}, named, args.also_checkout)
        servers += also.values()
    unread = None
    if args.cold:  # the same without the read-ahead of the weights during the imports
        no_read_ahead = {**entry, "worker_env": {READ_AHEAD_ENV: "0"}}
        unread = start_gateway(
            workdir, "gateway-unread", {}, [{**no_read_ahead, "served_model_name": "m"}]
        )
        servers.append(unread)
    warm_up = [spare, plain, *also.values(), *([unread] if unread else [])]
    for server in warm_up:  # warm up, first spare
        gateway_first_token(server, "m", "warm up")
        post(server, "/v1/models/m/unload")
    prompt = "Hello, how are you?"
    bytecode = workdir / "fresh-bytecode"
    fresh_first_token(model, prompt, bytecode)  # compiles its imports once
    for round_ in range(args.rounds):
        print(f"round {round_ + 1}", flush=True)
        order = ["fresh", "fresh-warm", "spare", "plain", *also, *(["unread"] if unread else [])]
        if round_ % 2:
            order.reverse()
        for setup in order:
            if args.cold:
                evict_weights(model)
            if setup == "fresh":
                elapsed, phases = fresh_first_token(model, prompt)
                add("a/fresh", elapsed)
                for phase, seconds in phases.items():
                    figures.setdefault(f"a/fresh_{phase}", []).append(seconds)
            elif setup == "fresh-warm":
                elapsed, phases = fresh_first_token(model, prompt, bytecode)
                add("a/fresh_warm", elapsed)
                figures.setdefault("a/fresh_warm_import", []).append(phases["import"])
            elif setup == "spare":
                wait_for(lambda: spare_ready(spare), "a ready spare")
                rss = max(s["memory"] for s in spare.get("/health")["spares"])
                figures.setdefault("a/spare_rss_mib", []).append(rss / 2**20)
                add("a/gateway+spare", gateway_first_token(spare, "m", prompt))
                post(spare, "/v1/models/m/unload")
                # The start asked for a new spare: its imports must not overlap the next setup.
                wait_for(lambda: spare_ready(spare), "the next spare")
            elif setup == "plain":
                add("a/gateway", gateway_first_token(plain, "m", prompt))
                for phase, seconds in worker_phases(plain).items():
                    figures.setdefault(f"a/worker_{phase}", []).append(seconds)
                post(plain, "/v1/models/m/unload")
            elif setup == "also-spare":
                other = also[setup]
                wait_for(lambda: spare_ready(other), "a ready spare")  # noqa: B023 (now)
                add("a/also+spare", gateway_first_token(other, "m", prompt))
                post(other, "/v1/models/m/unload")
                wait_for(lambda: spare_ready(other), "the next spare")  # noqa: B023 (now)
            elif setup == "also-plain":
                add("a/also", gateway_first_token(also[setup], "m", prompt))
                for phase, seconds in worker_phases(also[setup]).items():
                    figures.setdefault(f"a/also_worker_{phase}", []).append(seconds)
                post(also[setup], "/v1/models/m/unload")
            else:
                assert unread is not None
                add("a/gateway_unread", gateway_first_token(unread, "m", prompt))
                post(unread, "/v1/models/m/unload")
    for server in servers:
        server.stop()
    servers.clear()


def resume_rounds(
    args: argparse.Namespace,
    workdir: Path,
    entry: dict[str, Any],
    words: int,
    servers: list[Server],
    add: Any,
) -> None:
    """(b): turn 2 of a long conversation after eviction, with and without the disk tier."""
    print(f"(b) ~{args.context_tokens}-token conversation resumed after eviction", flush=True)
    disk = workdir / "prompt-cache"
    resume = start_gateway(
        workdir,
        "gateway-resume",
        {},
        [
            {**entry, "served_model_name": "disk", "prompt_cache_dir": str(disk)},
            {**entry, "served_model_name": "nodisk"},
        ],
    )
    servers.append(resume)
    for round_ in range(args.rounds):
        print(f"round {round_ + 1}", flush=True)
        order = ["disk", "nodisk"] if round_ % 2 == 0 else ["nodisk", "disk"]
        for name in order:
            ttft, cached = resumed_ttft(resume, name, 100 * round_ + len(name), words)
            add(f"b/{name}", ttft)
            add(f"b/{name}_cached_tokens", cached)


if __name__ == "__main__":
    sys.exit(main())
