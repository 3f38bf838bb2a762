"""An agent's session against the prompt cache: the gateway against mlx_lm.server.

    uv run --locked python -m bench.agent                        # 15,000-token system prompt
    uv run --locked python -m bench.agent --system-tokens 3000   # short, for 2 CPU cores
    uv run --locked python -m bench.agent --model ~/models/Qwen3-4B-4bit --families qwen3

Issue 32's session, replayed on each model against ``mlx-gateway launch`` (the real
command) and ``python -m mlx_lm.server``, one server after the other, each started
fresh on the same model folder with the same batch sizes:

* a system prompt of ``--system-tokens`` tokens as the chat template renders it,
  about a third instructions and two thirds the definitions of ten tools (sent in
  ``tools``);
* ten turns of the agent, each the whole conversation so far: its earlier tool calls
  and their results (``tool`` messages), one user follow-up, and after turn 6 one
  history rewrite (compaction: the conversation replaced by a summary under the same
  system prompt);
* after turn 4, two subagents started in parallel (the two requests sent at once),
  each with the same subagent system prompt (other instructions, the same tools),
  two turns each; their reports come back to the agent as tool results.

The script is fixed: the assistant messages in the history are fixed text and tool
calls, not what the server answered. The servers' own answers (``--max-tokens``
tokens, with any reasoning) are never sent back, as a thinking model's reasoning is
dropped from the history by its template: a cache that only stores prompt + answer
misses on every turn. So both servers get the same prompts, turn by turn.

Measured for each request: the prompt tokens, the cached ones (``usage``
``prompt_tokens_details.cached_tokens``, which both servers report) and the time to
the first content token. Per family it prints the tokens prefilled in all (prompt -
cached), the minimum (each prompt's tokens that no earlier prompt of the session
began with, counted from this process's rendering of the same messages; the second
subagent's shared system prompt counts once), the prompt cache's bytes after the
session (the gateway's ``mlx_gateway_model_memory_bytes{kind="kv_kept"}`` in
``/metrics``; mlx_lm.server reports its own only in its log, in GB to two decimals),
and issue 32's targets: the gateway within 10 % of the minimum on every family, and
at most half of what mlx_lm.server prefills.

By default each family is a tiny random-weight model of tests/fixtures/tiny_arch.py
(a plain llama, the Qwen3.5 hybrid of Gated DeltaNet and attention, Gemma 3's
sliding windows of 32 tokens), with a ChatML chat template that renders tools, tool
calls and results in Hermes' format (:data:`TOOL_TEMPLATE`) and a context long enough
for the session. ``--model DIR`` replays the session on an mlx-lm model folder with
its own template instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .agent_session import (
    Request,
    Step,
    new_tokens,
    opening_tokens,
    render,
    session,
    system_prompts,
)
from .servers import reexec_with_openblas

SERVED_NAME = "agent"
DEFAULT_FAMILIES = ("llama", "qwen3_5", "gemma3_text")
"""A plain-attention model, a hybrid and a sliding-window one."""
TINY_CONTEXT = 131072
"""The context written into the tiny models' config (the fixture's 2,048 is too short
for the session; rope has no table, so a longer one costs nothing)."""
WITHIN_MINIMUM = 1.10
OF_MLX_LM_SERVER = 0.5

TOOL_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' or tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% endif %}"
    "{% if tools %}\n\n# Tools\n<tools>\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
    "</tools>{% endif %}<|im_end|>\n{% endif %}"
    "{%- for m in messages %}"
    "{%- if m['role'] == 'system' and loop.first %}"
    "{%- elif m['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m['content'] }}"
    "\n</tool_response><|im_end|>\n"
    "{%- elif m['role'] == 'assistant' %}<|im_start|>assistant\n{{ m['content'] or '' }}"
    "{% for c in m['tool_calls'] or [] %}\n<tool_call>\n"
    '{"name": "{{ c["function"]["name"] }}", "arguments": '
    '{% if c["function"]["arguments"] is string %}{{ c["function"]["arguments"] }}'
    '{% else %}{{ c["function"]["arguments"] | tojson }}{% endif %}}\n</tool_call>'
    "{% endfor %}<|im_end|>\n"
    "{%- else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{%- endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""ChatML with tools in the system turn, calls and results in Hermes' tags (as Qwen's
templates write them); arguments rendered alike whether they come as a JSON string
(the gateway passes them on) or as an object (mlx_lm.server parses them first)."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.agent", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--system-tokens",
        type=int,
        default=15000,
        help="the agent's system prompt with its tools, in tokens (default 15,000; "
        "a CPU run: a few thousand)",
    )
    parser.add_argument(
        "--families",
        nargs="+",
        default=list(DEFAULT_FAMILIES),
        help="tiny_arch families to build and measure (default: llama qwen3_5 "
        "gemma3_text); with --model, the names the report gives the folders",
    )
    parser.add_argument(
        "--model",
        type=Path,
        action="append",
        default=[],
        help="an mlx-lm model folder to replay the session on instead (repeatable; "
        "its own chat template)",
    )
    parser.add_argument("--max-tokens", type=int, default=16, help="tokens per answer")
    parser.add_argument(
        "--concurrency", type=int, default=4, help="both servers' concurrent requests"
    )
    parser.add_argument("--prefill-batch", type=int, default=4, help="prompts prefilled together")
    parser.add_argument("--no-mlx-lm-server", action="store_true", help="skip mlx_lm.server")
    parser.add_argument("--no-openblas", action="store_true", help="do not preload OpenBLAS here")
    parser.add_argument("--workdir", type=Path, help="keep the models and logs here")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    return parser.parse_args(argv)


# ---------------------------------------------------------------- replaying

_PROMPT_TOKENS = re.compile(rb'"prompt_tokens": ?(\d+)')


@dataclass
class Outcome:
    """One request as a server answered it."""

    label: str
    prompt_tokens: int = 0
    cached_tokens: int = 0
    ttft_ms: float = float("nan")
    error: str | None = None

    @property
    def prefilled(self) -> int:
        return self.prompt_tokens - self.cached_tokens


@dataclass
class Replay:
    server: str
    outcomes: list[Outcome] = field(default_factory=list)
    cache_bytes: float | None = None

    @property
    def prefilled(self) -> int:
        return sum(o.prefilled for o in self.outcomes)

    @property
    def prompt_tokens(self) -> int:
        return sum(o.prompt_tokens for o in self.outcomes)

    @property
    def errors(self) -> list[str]:
        return [f"{o.label}: {o.error}" for o in self.outcomes if o.error]


def request_body(model: str, request: Request, max_tokens: int) -> bytes:
    return json.dumps(
        {
            "model": model,
            "messages": request.messages,
            "tools": request.tools,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()


async def send(port: int, model: str, request: Request, max_tokens: int) -> Outcome:
    from .client import stream_chat

    result = await stream_chat(port, request_body(model, request, max_tokens), keep_body=True)
    outcome = Outcome(request.label, error=result.error, cached_tokens=result.cached_tokens)
    counts = _PROMPT_TOKENS.findall(result.body)
    if counts:
        outcome.prompt_tokens = int(counts[-1])
    elif outcome.error is None:
        outcome.error = "no prompt_tokens in the usage"
    if result.ttft is not None:
        outcome.ttft_ms = result.ttft * 1000
    return outcome


async def replay(server: Any, steps: list[Step], max_tokens: int) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for step in steps:
        outcomes += await asyncio.gather(
            *(send(server.port, server.model_name, r, max_tokens) for r in step)
        )
    return outcomes


WARM_UP = Request("warm-up", [{"role": "user", "content": "Warm up: say something short."}], [])
"""One short unrelated conversation before the session: loads, compiles (not
counted; the minimum counts the few tokens it shares with the session as known)."""


def warm_up(server: Any, max_tokens: int) -> None:
    outcome = asyncio.run(send(server.port, server.model_name, WARM_UP, max_tokens))
    if outcome.error:
        raise RuntimeError(f"{server.name} warm-up failed: {outcome.error}\n{server.log()}")


def kept_bytes(server: Any) -> float | None:
    """The gateway's prompt-cache bytes (``kv_kept`` in ``/metrics``), once the worker
    has reported after the session (it reports with its heartbeats)."""
    model = re.escape(f'model="{server.model_name}"')
    pattern = re.compile(
        r"^mlx_gateway_model_memory_bytes\{(?=[^}]*" + model + r')(?=[^}]*kind="kv_kept")'
        r"[^}]*\}\s+(\S+)",
        re.M,
    )
    time.sleep(3.0)  # a heartbeat (2 s) after the last request
    url = f"http://127.0.0.1:{server.port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    found = pattern.search(text)
    return float(found.group(1)) if found else None


# ---------------------------------------------------------------- models


def tiny_model(family: str, out: Path) -> Path:
    """tests/fixtures/tiny_arch.py's ``family`` with :data:`TOOL_TEMPLATE` and a
    context of :data:`TINY_CONTEXT`."""
    from tests.fixtures.tiny_arch import build_arch

    build_arch(family, out)
    config = json.loads((out / "config.json").read_text())
    config["max_position_embeddings"] = TINY_CONTEXT
    (out / "config.json").write_text(json.dumps(config, indent=1))
    settings = json.loads((out / "tokenizer_config.json").read_text())
    settings["model_max_length"] = TINY_CONTEXT
    settings["chat_template"] = TOOL_TEMPLATE
    (out / "tokenizer_config.json").write_text(json.dumps(settings, indent=1))
    return out


@dataclass
class Family:
    name: str
    model_dir: Path
    system_tokens: int = 0
    labels: list[str] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    minimum: list[int] = field(default_factory=list)
    replays: dict[str, Replay] = field(default_factory=dict)

    @property
    def minimum_total(self) -> int:
        return sum(self.minimum)


def measure(args: argparse.Namespace, family: Family, workdir: Path) -> None:
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    from .servers import start_gateway, start_mlx_lm_server

    tokenizer = load_tokenizer(family.model_dir)  # the wrapper both servers render with
    main_system, sub_system, tools = system_prompts(tokenizer, args.system_tokens)
    family.system_tokens = opening_tokens(tokenizer, main_system, tools)
    steps = session(main_system, sub_system, tools)
    requests = [r for step in steps for r in step]
    prompts = [render(tokenizer, r) for r in requests]
    family.labels = [r.label for r in requests]
    family.prompt_tokens = [len(p) for p in prompts]
    family.minimum = new_tokens([render(tokenizer, WARM_UP), *prompts])[1:]
    starts = {
        "mlx-gateway": lambda: start_gateway(
            workdir,
            family.model_dir,
            SERVED_NAME,
            args.concurrency,
            args.prefill_batch,
        ),
        "mlx_lm.server": lambda: start_mlx_lm_server(
            workdir, family.model_dir, args.concurrency, args.prefill_batch, {**os.environ}
        ),
    }
    if args.no_mlx_lm_server:
        del starts["mlx_lm.server"]
    for label, start in starts.items():
        print(f"{family.name}: {label} …", flush=True)
        server = start()
        try:
            if label == "mlx-gateway":
                from .servers import wait_model_ready

                wait_model_ready(server, SERVED_NAME)
            warm_up(server, args.max_tokens)
            outcomes = asyncio.run(replay(server, steps, args.max_tokens))
            run = Replay(label, outcomes)
            if label == "mlx-gateway":
                run.cache_bytes = kept_bytes(server)
            family.replays[label] = run
            if run.errors:
                print(f"  errors: {run.errors}\n{server.log()}", flush=True)
        finally:
            server.stop()


# ---------------------------------------------------------------- report


def _n(value: float) -> str:
    return "—" if value != value else f"{value:,.0f}"


def _mib(value: float | None) -> str:
    return "not reported" if value is None else f"{value / 2**20:,.2f} MiB"


def report(args: argparse.Namespace, families: list[Family], info: dict[str, Any]) -> list[str]:
    first = families[0]
    requests = len(first.labels)
    lines = [
        f"machine: {info['cpu']}, {info['cores']} cores, {info['system']}, "
        f"Python {info['python']}, mlx {info['mlx']}, mlx-lm {info['mlx-lm']}, "
        f"MLX device {info['device']}",
        f"blas: {info['blas']}",
        f"load average at start {info['load_average_start']}, at the end {info['load_average']}",
        f"session: {requests} requests (10 turns of the agent, 2 subagents x 2 turns sent "
        f"in parallel, 1 compaction before turn 7); system prompt with 10 tools "
        + ", ".join(f"{f.name} {f.system_tokens:,}" for f in families)
        + f" tokens (--system-tokens {args.system_tokens:,}); {args.max_tokens} tokens per "
        "answer; replies in the history are fixed text (the answers are never sent back)",
        f"both servers: {args.concurrency} concurrent requests, prefill batch "
        f"{args.prefill_batch}, default prompt-cache settings",
        "",
        "| family | server | prompt tokens | prefilled | minimum | prefilled / minimum "
        "| vs mlx_lm.server | prompt cache after | TTFT sum ms |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for family in families:
        base = family.replays.get("mlx_lm.server")
        for label, run in family.replays.items():
            ratio = run.prefilled / family.minimum_total if family.minimum_total else float("nan")
            versus = run.prefilled / base.prefilled if base and base.prefilled else float("nan")
            cache = _mib(run.cache_bytes)
            ttft = sum(o.ttft_ms for o in run.outcomes)
            lines.append(
                f"| {family.name} | {label} | {run.prompt_tokens:,} | {run.prefilled:,} "
                f"| {family.minimum_total:,} | {ratio:.2f} "
                f"| {'—' if versus != versus else f'{versus:.2f}'} | {cache} | {_n(ttft)} |"
            )
    lines += ["", "per request: new tokens (the minimum); each server's prefilled tokens, TTFT ms"]
    header = "| request | " + " | ".join(
        f"{f.name} new | " + " | ".join(f"{f.name} {label}" for label in f.replays)
        for f in families
    )
    lines += [header + " |", "|---|" + "---|" * (header.count("|") - 1)]
    for k in range(requests):
        cells = [first.labels[k]]
        for family in families:
            cells.append(f"{family.minimum[k]:,}")
            for run in family.replays.values():
                o = run.outcomes[k]
                cells.append(f"{o.prefilled:,}, {_n(o.ttft_ms)}")
        lines.append("| " + " | ".join(cells) + " |")
    notes = []
    for family in families:
        for label, run in family.replays.items():
            if run.errors:
                notes.append(f"{family.name} {label}: errors: {'; '.join(run.errors)}")
            sent = [o.prompt_tokens for o in run.outcomes]
            if sent != family.prompt_tokens:
                notes.append(
                    f"{family.name} {label}: its prompt tokens differ from this process's "
                    f"rendering ({sum(sent):,} against {sum(family.prompt_tokens):,}): the "
                    "minimum is this process's"
                )
    if notes:
        lines += ["", *notes]
    lines += ["", "targets:"] + ["  " + line for line in targets(families)]
    return lines


def targets(families: list[Family]) -> list[str]:
    out = []
    for family in families:
        gateway = family.replays.get("mlx-gateway")
        if gateway is None:
            continue
        limit = WITHIN_MINIMUM * family.minimum_total
        ok = gateway.prefilled <= limit and not gateway.errors
        out.append(
            f"[{'PASS' if ok else 'MISS'}] {family.name}: gateway prefilled {gateway.prefilled:,} "
            f"≤ {WITHIN_MINIMUM:.2f} x minimum {family.minimum_total:,} "
            f"({gateway.prefilled / max(family.minimum_total, 1):.2f})"
        )
        base = family.replays.get("mlx_lm.server")
        if base is not None:
            ratio = gateway.prefilled / base.prefilled if base.prefilled else float("inf")
            ok = ratio <= OF_MLX_LM_SERVER and not gateway.errors
            out.append(
                f"[{'PASS' if ok else 'MISS'}] {family.name}: gateway / mlx_lm.server prefilled "
                f"≤ {OF_MLX_LM_SERVER:.2f} ({gateway.prefilled:,} / {base.prefilled:,} = "
                f"{ratio:.2f})"
            )
    return out


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if not args.no_openblas:
        reexec_with_openblas("bench.agent", argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from .lm_report import machine

    info = machine()
    info["load_average_start"] = info["load_average"]
    families: list[Family] = []
    with tempfile.TemporaryDirectory(prefix="bench-agent-") as tmp:
        workdir = args.workdir or Path(tmp)
        if args.model:
            names = args.families if len(args.families) == len(args.model) else None
            for k, folder in enumerate(args.model):
                name = names[k] if names else folder.resolve().name
                families.append(Family(name, folder.resolve()))
        else:
            for name in args.families:
                families.append(Family(name, tiny_model(name, workdir / name / "model")))
        for family in families:
            (workdir / family.name).mkdir(parents=True, exist_ok=True)
            measure(args, family, workdir / family.name)
    info["load_average"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    lines = report(args, families, info)
    print()
    print("\n".join(lines))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": info,
                    "families": [
                        {
                            "name": f.name,
                            "system_tokens": f.system_tokens,
                            "labels": f.labels,
                            "prompt_tokens": f.prompt_tokens,
                            "minimum": f.minimum,
                            "replays": {
                                label: {
                                    "cache_bytes": run.cache_bytes,
                                    "outcomes": [vars(o) for o in run.outcomes],
                                }
                                for label, run in f.replays.items()
                            },
                        }
                        for f in families
                    ],
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
