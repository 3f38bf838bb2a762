"""workers/transcriber.py: window by window, the same transcript as
``mlx_whisper.transcribe`` over the whole file, on the same model and audio."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mlx_gateway.workers.whisper.transcriber import language_code
from tests.fixtures.whisper import FOX_CLIPS, blas_env

from ..whisper_compare import compare, load

pytestmark = pytest.mark.slow

NOISE = (0.2 * np.random.default_rng(1).standard_normal(16_000 * 35)).astype(np.float32)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or abs(a - b) < 1e-6
    return bool(a == b)


def assert_same_transcript(library: dict[str, Any], ours: dict[str, Any]) -> None:
    assert ours["text"] == library["text"]
    assert len(ours["segments"]) == len(library["segments"])
    for expected, got in zip(library["segments"], ours["segments"], strict=True):
        for key, value in expected.items():
            if key == "words":  # the library leaves an empty list on emptied segments
                assert [(w["word"], w["start"], w["end"]) for w in got.get("words", [])] == [
                    (w["word"], w["start"], w["end"]) for w in value
                ]
            else:
                assert same(value, got[key]), (key, value, got[key])


@pytest.mark.parametrize(
    "options",
    [
        # Temperature 0: each window may be retried hotter, as the library does.
        {},
        # Sampled (the same seed on both sides), with word timings and a prompt.
        {"temperature": 0.5, "word_timestamps": True, "prompt": "Noise, then words."},
    ],
)
def test_several_windows_match_the_library(
    tiny_whisper_path: Path, options: dict[str, Any]
) -> None:
    result = compare(tiny_whisper_path, NOISE, **options)
    assert result["windows"] >= 2
    assert_same_transcript(result["library"], result["ours"])


def test_real_speech_matches_the_library(tiny_en_path: Path) -> None:
    # A subprocess, so that it runs with OpenBLAS preloaded where the machine has it.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.workers.whisper_compare",
            str(tiny_en_path),
            str(FOX_CLIPS[0]),
            json.dumps({"word_timestamps": True}),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **blas_env()},
        cwd=Path(__file__).resolve().parents[3],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert "lazy dog" in result["ours"]["text"]
    assert_same_transcript(result["library"], result["ours"])
    words = [w["word"].strip() for s in result["ours"]["segments"] for w in s["words"]]
    assert words[-2:] == ["lazy", "dog."]


def test_language_names_and_codes(tiny_whisper_path: Path) -> None:
    model = load(tiny_whisper_path)  # English-only
    assert language_code(model, None) is None
    assert language_code(model, "EN") is None
    assert language_code(model, "english") is None
    with pytest.raises(ValueError, match="English only"):
        language_code(model, "fr")
