"""Realtime latency: first audio of a spoken answer through ``/v1/realtime`` against
the three stages called one after another in process.

    uv run python -m bench.realtime                 # tiny.en, the tiny lm, tiny Soprano
    uv run python -m bench.realtime --runs 5 --lm-tokens 48 --tts-tokens 40
    uv run python -m bench.realtime --lm mlx-community/Qwen3-0.6B-4bit --tts ... --whisper ...
    uv run python -m bench.realtime --vad           # server_vad: early transcription on/off

The same turn (espeak-ng's "The quick brown fox jumps over the lazy dog.", 2.8 s,
the tests' fox clip) goes through both sides:

* in process, one after another, each library called directly: mlx-whisper's
  ``transcribe``, then mlx-lm's ``stream_generate`` on the chat template of
  [instructions, transcript] until its first sentence is complete, then
  mlx-audio's ``generate`` of that sentence until its first audio. The sum of the
  three is the baseline;
* the gateway: ``mlx-gateway launch`` serving the three models, the official
  ``openai`` SDK's realtime client sending the turn as pcm16 at 24 kHz, then
  ``input_audio_buffer.commit`` and ``response.create``; timed from the commit to
  the first ``response.output_audio.delta``. The gateway's own stage marks (its
  ``realtime latency`` log line) say where that time went.

Runs alternate (in process, gateway, …) after one warm-up each; medians are printed,
with the ratio gateway / in-process sum (the target is at most 1.1).

``--vad``: the turn ends by server_vad instead (``silence_duration_ms`` 500, or
``--silence-ms``): the clip and 2 s of silence after it are streamed in 100 ms
chunks at the pace of speech, each sent when its 100 ms are over, and the time is
from the end of the speech (``speech_stopped``'s ``audio_end_ms``, when it was
spoken) to the first audio delta. Two gateways alternate, one with
``realtime.early_transcription`` (the transcription starts at the first silence)
and one without (at the commit, after ``silence_duration_ms``); no in-process side.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np

from .servers import launch_gateway, reexec_with_openblas, wait_model_ready

ROOT = Path(__file__).resolve().parent.parent
INSTRUCTIONS = "Answer in one short sentence."
ASR, LM, TTS = "bench-whisper", "bench-lm", "bench-tts"
STAGES = ("vad", "transcribed", "first_token", "first_sentence", "first_audio")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--whisper", help="mlx-whisper model folder (default: tiny.en)")
    parser.add_argument("--lm", help="mlx-lm model folder or hub id (default: the tiny lm)")
    parser.add_argument("--tts", help="mlx-audio model folder or hub id (default: tiny Soprano)")
    parser.add_argument("--lm-tokens", type=int, default=32, help="max tokens of the answer")
    parser.add_argument("--tts-tokens", type=int, default=40, help="tts max_tokens (0: off)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--vad", action="store_true", help="server_vad, early transcription on/off")
    parser.add_argument("--silence-ms", type=int, default=500, help="--vad: silence_duration_ms")
    return parser.parse_args(argv)


def models(args: argparse.Namespace, workdir: Path) -> tuple[str, str, str]:
    """The three model folders: the given ones, else the tests' tiny ones."""
    sys.path.insert(0, str(ROOT))
    from tests.fixtures.tiny_models import build_tiny_lm
    from tests.fixtures.tiny_soprano import build_tiny_soprano
    from tests.fixtures.whisper import convert_tiny_en

    whisper = args.whisper or str(convert_tiny_en(workdir / "whisper-tiny.en"))
    lm = args.lm or str(build_tiny_lm(workdir / "tiny-lm"))
    tts = args.tts or str(build_tiny_soprano(workdir / "tiny-soprano"))
    return whisper, lm, tts


def fox_16k() -> np.ndarray:
    from mlx_gateway.workers.common.audio import decode_audio

    return np.concatenate(list(decode_audio((ROOT / "tests/data/fox.ogg").read_bytes())))


def pcm24k(samples: np.ndarray) -> bytes:
    at = np.interp(np.arange(0, len(samples) * 1.5) / 1.5, np.arange(len(samples)), samples)
    return (np.clip(at, -1, 1) * 32767).astype("<i2").tobytes()


def tts_kwargs(tokens: int) -> dict[str, Any]:
    return {"max_tokens": tokens} if tokens else {}


class InProcess:
    """The three libraries, loaded once, called one after another."""

    def __init__(self, whisper: str, lm: str, tts: str, lm_tokens: int, tts_tokens: int) -> None:
        import mlx_lm
        from mlx_audio.tts.utils import load_model

        self.whisper = whisper
        self.lm, self.tokenizer = mlx_lm.load(lm)[:2]
        self.tts = load_model(Path(tts) if Path(tts).exists() else tts)  # type: ignore[arg-type]
        self.lm_tokens, self.tts_kwargs = lm_tokens, tts_kwargs(tts_tokens)

    def run(self, audio: np.ndarray) -> dict[str, float]:
        """Seconds of each stage of one turn."""
        import mlx.core as mx
        import mlx_lm
        import mlx_whisper

        from mlx_gateway.supervisor.engine.sentences import SentenceBuffer

        started = time.perf_counter()
        text = mlx_whisper.transcribe(audio, path_or_hf_repo=self.whisper)["text"].strip()
        heard = time.perf_counter()
        messages = [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": text},
        ]
        prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        buffer, sentence, first_token = SentenceBuffer(), "", 0.0
        for out in mlx_lm.stream_generate(
            self.lm, self.tokenizer, prompt, max_tokens=self.lm_tokens
        ):
            first_token = first_token or time.perf_counter()
            done = buffer.add(out.text)
            if done:
                sentence = done[0]
                break
        sentence = sentence or buffer.finish() or "."
        written = time.perf_counter()
        result = next(iter(self.tts.generate(text=sentence, verbose=False, **self.tts_kwargs)))
        mx.eval(result.audio)
        spoken = time.perf_counter()
        return {
            "transcription": heard - started,
            "prefill": first_token - heard,
            "first_sentence": written - heard,
            "first_audio": spoken - written,
            "total": spoken - started,
            "sentence_chars": len(sentence),
        }


class Gateway:
    def __init__(
        self,
        workdir: Path,
        whisper: str,
        lm: str,
        tts: str,
        tts_tokens: int,
        early: bool = True,
    ) -> None:
        common = {"on_demand": False, "idle_timeout": 0}
        tts_entry: dict[str, Any] = {"served_model_name": TTS, "model_path": tts}
        tts_entry |= {"model_type": "tts", **common}
        if tts_tokens:
            tts_entry["generate_kwargs"] = tts_kwargs(tts_tokens)
        entries = [
            {"served_model_name": ASR, "model_path": whisper, "model_type": "whisper", **common},
            {"served_model_name": LM, "model_path": lm, **common},
            tts_entry,
        ]
        self.server = launch_gateway(
            workdir,
            entries,
            {"log_level": "info"},
            f"the gateway (early transcription {'on' if early else 'off'})",
            "gateway-early" if early else "gateway-late",
            {"early_transcription": early},
        )
        for name in (ASR, LM, TTS):
            wait_model_ready(self.server, name, 300)

    async def turn(self, audio: bytes, lm_tokens: int) -> dict[str, float]:
        """Seconds from the commit to the first audio delta, and the gateway's marks."""
        async with self.connect(lm_tokens, None) as conn:
            for i in range(0, len(audio), 9600):
                chunk = base64.b64encode(audio[i : i + 9600]).decode()
                await conn.input_audio_buffer.append(audio=chunk)
            response: str | None = None
            committed = time.perf_counter()
            await conn.input_audio_buffer.commit()
            await conn.response.create()
            first = 0.0
            async for event in conn:
                if event.type == "response.created":
                    response = event.response.id
                elif event.type == "response.output_audio.delta" and not first:
                    first = time.perf_counter() - committed
                elif event.type == "error":
                    raise RuntimeError(event.error.message)
                elif event.type == "response.done":
                    break
        return {"first_audio": first, **self.marks(response)}

    async def vad_turn(self, audio: bytes, lm_tokens: int, silence_ms: int) -> dict[str, float]:
        """Seconds from the end of the speech to the first audio delta (server_vad,
        the audio streamed at the pace of speech), and the gateway's marks."""
        vad = {"type": "server_vad", "silence_duration_ms": silence_ms}
        async with self.connect(lm_tokens, vad) as conn:
            start = time.perf_counter()

            async def speak() -> None:
                for k, i in enumerate(range(0, len(audio), CHUNK)):
                    await asyncio.sleep(max(0.0, start + (k + 1) * 0.1 - time.perf_counter()))
                    chunk = base64.b64encode(audio[i : i + CHUNK]).decode()
                    await conn.input_audio_buffer.append(audio=chunk)

            speaking = asyncio.ensure_future(speak())
            response: str | None = None
            first = speech_end_s = 0.0
            try:
                async for event in conn:
                    if event.type == "input_audio_buffer.speech_stopped":
                        speech_end_s = event.audio_end_ms / 1000
                    elif event.type == "response.created":
                        response = event.response.id
                    elif event.type == "response.output_audio.delta" and not first:
                        first = time.perf_counter() - start - speech_end_s
                    elif event.type == "error":
                        raise RuntimeError(event.error.message)
                    elif event.type == "response.done":
                        break
            finally:
                speaking.cancel()
        return {"first_audio": first, **self.marks(response)}

    @contextlib.asynccontextmanager
    async def connect(
        self, lm_tokens: int, turn_detection: dict[str, Any] | None
    ) -> AsyncIterator[Any]:
        """A realtime connection to the gateway, its session set for spoken answers
        (pcm16 out) with ``turn_detection``."""
        import openai

        client = openai.AsyncOpenAI(
            base_url=f"http://127.0.0.1:{self.server.port}/v1", api_key="x", max_retries=0
        )
        async with client.realtime.connect(model=LM) as conn:
            await conn.session.update(
                session={
                    "type": "realtime",
                    "instructions": INSTRUCTIONS,
                    "output_modalities": ["audio"],
                    "max_output_tokens": lm_tokens,
                    "audio": {
                        "input": {
                            "transcription": {"model": ASR},
                            "turn_detection": turn_detection,
                        },
                        "output": {"format": {"type": "audio/pcm", "rate": 24000}},
                    },
                }
            )
            yield conn

    def marks(self, response: str | None) -> dict[str, float]:
        """The stages of ``response`` from the gateway's ``realtime latency`` line."""
        for line in self.server.log().splitlines():
            if response and f"realtime latency {response}:" in line:
                found = re.findall(r"(\w+)=(\d+)ms", line)
                return {f"gateway_{k}": int(v) / 1000 for k, v in found}
        return {}

    def stop(self) -> None:
        self.server.stop()


CHUNK = 4800
"""100 ms of pcm16 at 24 kHz."""


def vad_main(args: argparse.Namespace, samples: np.ndarray) -> None:
    """``--vad``: early transcription on against off, one after another."""
    lead, tail = np.zeros(4800), np.zeros(32000)  # 0.3 s before, 2 s after (16 kHz)
    audio = pcm24k(np.concatenate([lead, samples, tail]))
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        whisper, lm, tts = models(args, workdir)
        sides = {
            early: Gateway(workdir, whisper, lm, tts, args.tts_tokens, early)
            for early in (False, True)
        }
        runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
        try:
            for i in range(args.runs + 1):  # the first is a warm-up
                for early, gateway in sides.items():
                    turn = gateway.vad_turn(audio, args.lm_tokens, args.silence_ms)
                    figures = asyncio.run(turn)
                    if i:
                        runs[early].append(figures)
        finally:
            for gateway in sides.values():
                gateway.stop()
    figures: dict[str, Any] = {"runs": args.runs, "silence_ms": args.silence_ms}
    lines = [
        f"first audio after the end of the speech, server_vad (silence_duration_ms "
        f"{args.silence_ms}), {args.runs} runs (medians, seconds)"
    ]
    for early, name in ((False, "late"), (True, "early")):
        figures[f"{name}_speech_end_to_first_audio_s"] = median(runs[early], "first_audio")
        for k in STAGES:
            figures[f"{name}_gateway_{k}_s"] = median(runs[early], f"gateway_{k}")
        marks = ", ".join(f"{k} {figures[f'{name}_gateway_{k}_s']}" for k in STAGES)
        lines.append(
            f"  early transcription {'on ' if early else 'off'}: "
            f"{figures[f'{name}_speech_end_to_first_audio_s']}; gateway marks (vad, then "
            f"from its decision): {marks}"
        )
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


def median(runs: list[dict[str, float]], key: str) -> float:
    values = [r[key] for r in runs if key in r]
    return round(statistics.median(values), 3) if values else float("nan")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    reexec_with_openblas("bench.realtime", argv)  # as the gateway preloads it into workers
    args = parse_args(argv)
    samples = fox_16k()
    if args.vad:
        vad_main(args, samples)
        return
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        whisper, lm, tts = models(args, workdir)
        local = InProcess(whisper, lm, tts, args.lm_tokens, args.tts_tokens)
        gateway = Gateway(workdir, whisper, lm, tts, args.tts_tokens)
        try:
            local.run(samples)  # warm-up: kernels, caches
            asyncio.run(gateway.turn(pcm24k(samples), args.lm_tokens))
            inproc: list[dict[str, float]] = []
            served: list[dict[str, float]] = []
            for _ in range(args.runs):
                inproc.append(local.run(samples))
                served.append(asyncio.run(gateway.turn(pcm24k(samples), args.lm_tokens)))
        finally:
            gateway.stop()
    figures = {
        "runs": args.runs,
        "lm_tokens": args.lm_tokens,
        "tts_tokens": args.tts_tokens,
        **{f"inprocess_{k}_s": median(inproc, k) for k in inproc[0] if k != "sentence_chars"},
        "inprocess_sentence_chars": median(inproc, "sentence_chars"),
        "gateway_first_audio_s": median(served, "first_audio"),
        **{f"gateway_{k}_s": median(served, f"gateway_{k}") for k in STAGES},
    }
    ratio = figures["gateway_first_audio_s"] / figures["inprocess_total_s"]
    figures["ratio"] = round(ratio, 3)
    i = {k: figures[f"inprocess_{k}_s"] for k in inproc[0] if k != "sentence_chars"}
    print(
        f"first audio of a spoken answer, {args.runs} runs (medians, seconds)\n"
        f"  in process, one after another: {i['total']} = transcription "
        f"{i['transcription']} + lm to its first sentence {i['first_sentence']} (prefill "
        f"{i['prefill']}, {int(figures['inprocess_sentence_chars'])} characters) "
        f"+ tts to its first audio {i['first_audio']}\n"
        f"  gateway (/v1/realtime, commit to first audio delta): "
        f"{figures['gateway_first_audio_s']}; its marks from the commit: "
        + ", ".join(f"{k} {figures[f'gateway_{k}_s']}" for k in STAGES[1:])
        + f"\n  gateway / in-process sum: {ratio:.3f} (target <= 1.1)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
