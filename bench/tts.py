"""Text to speech speed: the gateway's tts worker against mlx-audio in-process.

    uv run python -m bench.tts                      # the tiny random Soprano
    uv run python -m bench.tts --runs 5 --sentences 8 --tokens 80
    uv run python -m bench.tts --model mlx-community/Kokoro-82M-bf16 --tokens 0
    uv run python -m bench.tts --sentences 1 --tokens 1000   # one long generation
    uv run python -m bench.tts --generate split_pattern=' ' --tokens 300

Both sides synthesize the same text on the same model (by default the tests' tiny
random Soprano, 32 kHz, whose sentences each run to ``--tokens`` tokens of 64 ms):

* in-process: ``mlx_audio.tts.utils.load_model`` and the model's own ``generate``
  on the whole text, as mlx-audio's users call it;
* the gateway: ``mlx-gateway launch`` serving the model, ``POST /v1/audio/speech``
  with ``response_format: pcm`` (the worker cuts sentences, encodes to 24 kHz
  16-bit, relays over ZeroMQ and HTTP), timed to the last byte, with the time to the
  first byte beside it.

The runs alternate (in-process, gateway, …) after one warm-up each. Real-time factor
is seconds of audio per second of wall-clock time (higher is faster); the ratio
gateway / in-process is computed from the medians of this one run. With OpenBLAS
installed the benchmark restarts itself with it preloaded, as the gateway preloads it
into its workers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from .servers import launch_gateway, reexec_with_openblas, wait_model_ready, yaml_pairs

SERVED = "bench-tts"
WORDS = (
    "the gateway speaks every sentence as soon as it is ready, while the next one is "
    "still being written"
)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a local mlx-audio model or a hub id (default: tiny)")
    parser.add_argument("--tokens", type=int, default=40, help="max_tokens per sentence (0: off)")
    parser.add_argument("--sentences", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--generate",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="another keyword of the model's generate, on both sides (YAML value)",
    )
    parser.add_argument("--port", type=int, help="the gateway's port (default: a free one)")
    parser.add_argument("--json", help="write the figures to this file")
    return parser.parse_args(argv)


def text_of(sentences: int) -> str:
    return " ".join(f"Sentence {i + 1}: {WORDS}." for i in range(sentences))


def generate_kwargs(tokens: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**({"max_tokens": tokens} if tokens else {}), **(extra or {})}


class InProcess:
    def __init__(self, model_path: str, kwargs: dict[str, Any]) -> None:
        from mlx_audio.tts.utils import load_model

        path = Path(model_path)
        self.model = load_model(path if path.exists() else model_path)  # type: ignore[arg-type]
        self.kwargs = kwargs

    def run(self, text: str) -> tuple[float, float, float]:
        """(wall seconds, audio seconds, CPU seconds) of one synthesis."""
        import mlx.core as mx

        cpu = time.process_time()
        started = time.perf_counter()
        samples = 0
        rate = 0
        for result in self.model.generate(text=text, verbose=False, **self.kwargs):
            mx.eval(result.audio)  # MLX is lazy: the audio must really be computed
            samples += int(result.audio.shape[0])
            rate = int(result.sample_rate)
        return time.perf_counter() - started, samples / rate, time.process_time() - cpu


class Gateway:
    def __init__(
        self,
        workdir: Path,
        model_path: str,
        kwargs: dict[str, Any],
        port: int | None = None,
    ) -> None:
        entry: dict[str, Any] = {
            "served_model_name": SERVED,
            "model_path": model_path,
            "model_type": "tts",
            "on_demand": False,
            "idle_timeout": 0,
            "max_input_chars": 100_000,
        }
        if kwargs:
            entry["generate_kwargs"] = kwargs
        self.server = launch_gateway(workdir, [entry], name="the gateway", port=port)
        self.port = self.server.port
        wait_model_ready(self.server, SERVED, 300)

    def cpu(self) -> float:
        """CPU seconds of the gateway and its worker so far."""
        processes = [self.server.process, *self.server.children()]
        return sum(p.cpu_times().user + p.cpu_times().system for p in processes)

    def run(self, text: str) -> tuple[float, float, float, float]:
        """(wall seconds, audio seconds, CPU seconds of the gateway and its worker,
        seconds to the first byte) of one request."""
        cpu = self.cpu()
        body = {"model": SERVED, "input": text, "voice": "alloy", "response_format": "pcm"}
        url = f"http://127.0.0.1:{self.port}/v1/audio/speech"
        started = time.perf_counter()
        first = None
        size = 0
        with httpx.stream("POST", url, json=body, timeout=600) as response:
            response.raise_for_status()
            for piece in response.iter_raw():
                if piece and first is None:
                    first = time.perf_counter() - started
                size += len(piece)
        wall = time.perf_counter() - started
        return wall, size / 2 / 24_000, self.cpu() - cpu, first or wall

    def stop(self) -> None:
        self.server.stop()


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    reexec_with_openblas("bench.tts", argv)
    args = parse_args(argv)
    text = text_of(args.sentences)
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        model = args.model
        if model is None:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
            from tests.fixtures.tiny_soprano import build_tiny_soprano

            model = str(build_tiny_soprano(workdir / "tiny-soprano"))
        kwargs = generate_kwargs(args.tokens, yaml_pairs(args.generate, "--generate"))
        inprocess = InProcess(model, kwargs)
        gateway = Gateway(workdir, model, kwargs, args.port)
        try:
            inprocess.run(text)  # warm-up: compiled kernels, caches
            gateway.run(text)
            local: list[tuple[float, float, float]] = []
            served: list[tuple[float, float, float, float]] = []
            for _ in range(args.runs):
                local.append(inprocess.run(text))
                served.append(gateway.run(text))
        finally:
            gateway.stop()
    local_rtf = statistics.median(audio / wall for wall, audio, _ in local)
    served_rtf = statistics.median(audio / wall for wall, audio, _, _ in served)
    # CPU time: what a synthesis costs whatever else the machine is doing
    local_cpu = statistics.median(audio / cpu for _, audio, cpu in local)
    served_cpu = statistics.median(audio / cpu for _, audio, cpu, _ in served)
    figures = {
        "model": args.model or "tiny random Soprano (tests/fixtures/tiny_soprano.py)",
        "tokens_per_sentence": args.tokens,
        "generate": args.generate,
        "sentences": args.sentences,
        "characters": len(text),
        "runs": args.runs,
        "openblas": bool(os.environ.get("MLX_GATEWAY_BENCH_PRELOADED")),
        "inprocess_wall_s": round(statistics.median(r[0] for r in local), 3),
        "inprocess_audio_s": round(statistics.median(r[1] for r in local), 3),
        "inprocess_cpu_s": round(statistics.median(r[2] for r in local), 3),
        "inprocess_rtf": round(local_rtf, 3),
        "inprocess_audio_per_cpu_s": round(local_cpu, 3),
        "gateway_wall_s": round(statistics.median(r[0] for r in served), 3),
        "gateway_audio_s": round(statistics.median(r[1] for r in served), 3),
        "gateway_cpu_s": round(statistics.median(r[2] for r in served), 3),
        "gateway_first_byte_s": round(statistics.median(r[3] for r in served), 3),
        "gateway_rtf": round(served_rtf, 3),
        "gateway_audio_per_cpu_s": round(served_cpu, 3),
        "ratio": round(served_rtf / local_rtf, 3),
        "ratio_cpu": round(served_cpu / local_cpu, 3),
        "load_average": os.getloadavg(),
    }
    print(
        f"{figures['model']}: {args.sentences} sentences, {len(text)} characters, "
        f"{args.runs} runs (OpenBLAS: {figures['openblas']})\n"
        f"  mlx-audio in-process: {figures['inprocess_audio_s']} s of audio in "
        f"{figures['inprocess_wall_s']} s ({local_rtf:.2f}x real time), "
        f"{figures['inprocess_cpu_s']} s CPU\n"
        f"  gateway (HTTP, pcm):  {figures['gateway_audio_s']} s of audio in "
        f"{figures['gateway_wall_s']} s ({served_rtf:.2f}x real time), "
        f"{figures['gateway_cpu_s']} s CPU, first byte after {figures['gateway_first_byte_s']} s\n"
        f"  gateway / in-process: {figures['ratio']:.3f} (wall clock), "
        f"{figures['ratio_cpu']:.3f} (CPU time)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
