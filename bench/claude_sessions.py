"""Two Claude Code-shaped sessions in a row, against the gateway's prompt cache.

    uv run --locked python -m bench.claude_sessions                     # 6,000-token prompt
    uv run --locked python -m bench.claude_sessions --system-tokens 20000

Claude Code 2.1.332's first request of a session, as recorded from the real client
(through ``/v1/messages``): a billing block first in ``system``
(``x-anthropic-billing-header: cc_version=2.1.332.<3 characters of the session>;``),
then its system prompt and its tools (the same for every session in one project),
then one user message (a system reminder and the session's own question), then its
environment block as a system message after it. Two sessions with different first
questions are sent one after the other to ``mlx-gateway launch`` (the real command)
serving a tiny llama (tests/fixtures/tiny_arch.py) whose chat template renders every
tool's definition in the system turn, as Qwen's do. Measured per second session:
its prompt tokens, those read from the cache, the time to its answer, and the
minimum it must prefill: its tokens that the first session's prompt did not begin
with (this process renders both prompts with the model's tokenizer, billing block
left out). Target (issue 48): the second session prefills within 10 % of that
minimum.

Baseline in the same run, on the same server: the same pair of sessions whose first
system block differs per session but does not begin ``x-anthropic-billing-header:``
(what every prompt cache saw of the real block before the gateway dropped it: the
templated prompts part at about their tenth token).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from .agent import tiny_model
from .agent_session import Request, common_prefix, filler, render, system_prompts
from .servers import reexec_with_openblas, start_gateway, wait_model_ready

SERVED_NAME = "coder"
WITHIN_MINIMUM = 1.10
REMINDER = (
    "<system-reminder>\nAttribution for git commits: end them with a trailer.\n</system-reminder>\n"
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.claude_sessions", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--system-tokens",
        type=int,
        default=6000,
        help="the system prompt with its tools, in tokens (default 6,000; Claude Code's "
        "is about 20,000 on a real tokenizer)",
    )
    parser.add_argument("--environment-words", type=int, default=600)
    parser.add_argument("--no-openblas", action="store_true", help="do not preload OpenBLAS here")
    parser.add_argument("--workdir", type=Path, help="keep the model and logs here")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    return parser.parse_args(argv)


@dataclass
class Shape:
    """What two sessions of one project share."""

    system: str
    tools: list[dict[str, Any]]
    environment: str

    def body(self, first_block: str, question: str) -> dict[str, Any]:
        anthropic_tools = [
            {
                "name": t["function"]["name"],
                "description": t["function"]["description"],
                "input_schema": t["function"]["parameters"],
            }
            for t in self.tools
        ]
        return {
            "model": SERVED_NAME,
            "max_tokens": 8,
            "temperature": 0.0,
            "system": [
                {"type": "text", "text": first_block},
                {"type": "text", "text": self.system, "cache_control": {"type": "ephemeral"}},
            ],
            "tools": anthropic_tools,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": REMINDER},
                        {"type": "text", "text": question},
                    ],
                },
                {"role": "system", "content": self.environment},
            ],
        }

    def chat(self, question: str) -> Request:
        """The prompt as the model sees it (no billing block), for the minimum."""
        messages = [
            {"role": "system", "content": self.system},
            {"role": "user", "content": REMINDER + question},
            {"role": "system", "content": self.environment},
        ]
        return Request(question, messages, self.tools)


@dataclass
class Sent:
    prompt_tokens: int
    cached_tokens: int
    seconds: float

    @property
    def prefilled(self) -> int:
        return self.prompt_tokens - self.cached_tokens


def send(port: int, body: dict[str, Any]) -> Sent:
    started = time.perf_counter()
    r = httpx.post(f"http://127.0.0.1:{port}/v1/messages", json=body, timeout=1200)
    took = time.perf_counter() - started
    r.raise_for_status()
    usage = r.json()["usage"]
    return Sent(usage["input_tokens"], usage["cache_read_input_tokens"], took)


QUESTIONS = (
    (
        "Why does the parser drop the last field of a line?",
        "What does the retry loop do on a timeout?",
    ),
    ("List the modules that write to the cache.", "Where is the lock taken in the queue?"),
)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    if not args.no_openblas:
        reexec_with_openblas("bench.claude_sessions", argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from mlx_lm.tokenizer_utils import load as load_tokenizer

    from .lm_report import machine

    info = machine()
    figures: dict[str, Any] = {"machine": info}
    with tempfile.TemporaryDirectory(prefix="bench-claude-") as tmp:
        workdir = args.workdir or Path(tmp)
        model = tiny_model("llama", workdir / "model")
        tokenizer = load_tokenizer(model)
        system, _sub, tools = system_prompts(tokenizer, args.system_tokens)
        shape = Shape(
            system, tools, "# Environment\n" + filler("environment", args.environment_words)
        )
        server = start_gateway(workdir, model, SERVED_NAME, 4, 4)
        lines = []
        try:
            wait_model_ready(server, SERVED_NAME)
            send(server.port, shape.body("warm up", "Warm up."))  # load and compile
            cases = (
                (
                    "billing block (dropped)",
                    "x-anthropic-billing-header: cc_version=2.1.332.{};",
                    0,
                ),
                ("per-session block kept (as before)", "session-header: cc_version=2.1.332.{};", 1),
            )
            for label, block, pair in cases:
                one, two = QUESTIONS[pair]
                first = send(server.port, shape.body(block.format("1a1"), one))
                second = send(server.port, shape.body(block.format("34c"), two))
                a, b = render(tokenizer, shape.chat(one)), render(tokenizer, shape.chat(two))
                minimum = len(b) - common_prefix(a, b)
                ratio = second.prefilled / minimum if minimum else float("nan")
                figures[label] = {
                    "first": vars(first),
                    "second": vars(second),
                    "second_minimum": minimum,
                    "second_over_minimum": ratio,
                }
                lines.append(
                    f"{label}: second session {second.prompt_tokens:,} prompt tokens, "
                    f"{second.cached_tokens:,} from the cache, prefilled {second.prefilled:,} "
                    f"(minimum {minimum:,}: {ratio:.2f}x), answered in {second.seconds:.2f} s "
                    f"(the first session: {first.seconds:.2f} s, "
                    f"{first.cached_tokens:,} cached)"
                )
        finally:
            server.stop()
    kept = figures["per-session block kept (as before)"]["second"]["seconds"]
    dropped = figures["billing block (dropped)"]["second"]["seconds"]
    ratio = figures["billing block (dropped)"]["second_over_minimum"]
    print(f"machine: {info}")
    print("\n".join(lines))
    print(
        f"second session's answer: {dropped:.2f} s against {kept:.2f} s with the block kept "
        f"({kept / dropped:.1f}x faster); prefill {ratio:.2f}x the minimum "
        f"(target ≤ {WITHIN_MINIMUM:.2f}x: {'met' if ratio <= WITHIN_MINIMUM else 'missed'})"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
