"""Speculative decoding: one solo stream with and without a draft model.

    uv run python -m bench.speculative                 # about a minute on 2 cores
    uv run python -m bench.speculative --rounds 5 --draft-tokens 2 4 --json out.json

The lm worker's backend (``LmBackend``, the code a worker runs) decodes one greedy
request of ``--max-tokens`` tokens alone, in this process, in three setups:

* ``plain``: no draft model;
* ``agrees``: a draft that always agrees. The model is a llama with ``--layers``
  layers that compute and ``--inert-layers`` more that cost the same but change
  nothing (zero output projections); the draft is the same llama without them, so
  every proposal is the model's own next token (the best case: code, or text that
  quotes the prompt, come close to it with a real draft);
* ``disagrees``: a random draft of the same size as the agreeing one: proposals are
  nearly always refused (the worst case: the cost of drafting for nothing).

Each round runs every setup once, alternating, and the report gives each setup's
median tokens/s, its ratio to ``plain`` in the same rounds, and the share of the
proposals taken. Every setup must produce the same token ids (checked). On Linux,
OpenBLAS (when installed) is preloaded as the gateway preloads it into workers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .servers import reexec_with_openblas

PROMPT = "Models stream tokens; the gateway relays them to every client."


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.speculative", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rounds", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens per request")
    parser.add_argument("--hidden", type=int, default=256, help="hidden size of every model")
    parser.add_argument("--layers", type=int, default=2, help="layers of the draft models")
    parser.add_argument(
        "--inert-layers", type=int, default=22, help="the model's extra (inert) layers"
    )
    parser.add_argument(
        "--draft-tokens", type=int, nargs="+", default=[3], help="num_draft_tokens to try"
    )
    parser.add_argument("--no-openblas", action="store_true", help="do not preload OpenBLAS")
    parser.add_argument("--json", type=Path, help="write every figure to this file")
    return parser.parse_args(argv)


def build(out: Path, hidden: int, layers: int, inert: int, seed: int) -> Path:
    """A tiny llama whose EOS row of the output layer is zero: greedy decoding then
    never stops before the budget, so every setup generates the same count."""
    import mlx.core as mx

    from tests.fixtures.tiny_models import build_tiny_lm

    build_tiny_lm(out, hidden=hidden, layers=layers, inert_layers=inert, seed=seed)
    eos = json.loads((out / "config.json").read_text())["eos_token_id"]
    weights = mx.load(str(out / "model.safetensors"))
    head = weights["lm_head.weight"]
    weights["lm_head.weight"] = head * (mx.arange(head.shape[0]) != eos)[:, None]
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    return out


class Setup:
    """A loaded lm backend that decodes one request at a time."""

    def __init__(self, model: Path, draft: Path | None, draft_tokens: int) -> None:
        from mlx_gateway.protocol.spec import WorkerSpec
        from mlx_gateway.workers.lm.backend import LmBackend

        options: dict[str, Any] = {"prompt_cache_bytes": 0}
        if draft is not None:
            options |= {"draft_model_path": str(draft), "num_draft_tokens": draft_tokens}
        spec = WorkerSpec(
            worker_id="bench",
            kind="lm",
            model_path=str(model),
            served_model_name="bench",
            options=options,
        )
        self.replies: list[Any] = []
        self.backend = LmBackend()
        self.backend.load(spec, self.replies.append)

    def run(self, max_tokens: int) -> tuple[float, list[int], int, int]:
        """Seconds, the token ids, proposals and proposals taken of one request."""
        from mlx_gateway.protocol.messages import Done, Generate, SamplingParams

        tokens: list[int] = []
        advance = self.backend.scheduler._advance

        def spy(active: Any, token: int, *rest: Any) -> Any:
            tokens.append(token)
            return advance(active, token, *rest)

        self.backend.scheduler._advance = spy  # type: ignore[method-assign]
        self.replies.clear()
        started = time.perf_counter()
        self.backend.submit(
            Generate(
                request_id="r",
                messages=[{"role": "user", "content": PROMPT}],
                sampling=SamplingParams(max_tokens=max_tokens, temperature=0.0),
            ),
            [],
        )
        while self.backend.has_work():
            self.backend.step()
        seconds = time.perf_counter() - started
        self.backend.scheduler._advance = advance  # type: ignore[method-assign]
        done = next(r for r in self.replies if isinstance(r, Done))
        return seconds, tokens, done.usage.draft_proposed, done.usage.draft_accepted


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not args.no_openblas:
        reexec_with_openblas("bench.speculative", argv)
    with tempfile.TemporaryDirectory(prefix="bench-spec-") as tmp:
        root = Path(tmp)
        model = build(root / "model", args.hidden, args.layers, args.inert_layers, seed=0)
        agrees = build(root / "agrees", args.hidden, args.layers, 0, seed=0)
        disagrees = build(root / "disagrees", args.hidden, args.layers, 0, seed=5)
        setups: dict[str, Setup] = {"plain": Setup(model, None, 0)}
        for k in args.draft_tokens:
            setups[f"agrees, {k} a round"] = Setup(model, agrees, k)
            setups[f"disagrees, {k} a round"] = Setup(model, disagrees, k)
        for setup in setups.values():
            setup.run(8)  # warm up (first-call compilation and allocation)
        speed: dict[str, list[float]] = {name: [] for name in setups}
        taken: dict[str, float] = {}
        reference: list[int] | None = None
        for _ in range(args.rounds):
            for name, setup in setups.items():
                seconds, ids, proposed, accepted = setup.run(args.max_tokens)
                reference = reference or ids
                if ids != reference:
                    print(f"{name}: other token ids than plain", file=sys.stderr)
                    return 1
                speed[name].append(len(ids) / seconds)
                taken[name] = accepted / proposed if proposed else float("nan")
    print(
        f"one greedy stream, {args.max_tokens} tokens; model: hidden {args.hidden}, "
        f"{args.layers} + {args.inert_layers} inert layers; drafts: {args.layers} layers; "
        f"{args.rounds} rounds (medians)"
    )
    plain = speed["plain"]
    figures = {}
    for name, values in speed.items():
        ratios = [v / p for v, p in zip(values, plain, strict=True)]
        figures[name] = {
            "tokens_per_s": statistics.median(values),
            "ratio_to_plain": statistics.median(ratios),
            "taken": taken[name],
        }
        share = "" if name == "plain" else f"   proposals taken {taken[name]:6.1%}"
        print(
            f"  {name:24s} {statistics.median(values):8.1f} tok/s   "
            f"{statistics.median(ratios):5.2f}x plain{share}"
        )
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)}, **figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
