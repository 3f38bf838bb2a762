"""What a worker imports before its first request, per kind: the kind's library
(its floor) and the runtime, and beyond those only the packages stated here.

A worker imports its backend at start (:func:`create_backend`, the same for a spare,
which does it before it is given a model); features a request may ask for later
(word timings, GGUF conversion, grammars, tool-call parsing, video) import their
packages when a request needs them. Each case runs the start in a fresh interpreter
with ``-X importtime`` and compares the top-level packages it imported, beyond
those the floor imports, with the kind's stated extras; a failure names each new
package and its import time.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from mlx_gateway.workers.runtime.extras import BARE_PACKAGES

pytestmark = pytest.mark.slow

RUNTIME = "import mlx_gateway.workers.runtime.process"
"""The worker's runtime (the process and its serve loop), imported before any backend."""

FLOORS: dict[str, tuple[str, ...]] = {
    "lm": ("mlx_lm",),
    "vlm": ("mlx_vlm",),
    "embeddings": ("mlx_embeddings",),
    "rerank": ("mlx_embeddings", "mlx_lm"),
    "whisper": (
        "mlx_whisper.load_models",
        "mlx_whisper.audio",
        "mlx_whisper.decoding",
        "mlx_whisper.tokenizer",
    ),
    "tts": ("mlx.core",),
    "image": ("mlx.core",),
}
"""What each kind's library needs imported to load a model (the whisper worker's
mlx-whisper without its package ``__init__``; tts and image import theirs at load)."""

EXTRAS: dict[str, frozenset[str]] = {
    "lm": frozenset(),
    "vlm": frozenset({"mlx_lm"}),  # the samplers and KV caches shared with lm (common/)
    "embeddings": frozenset(),
    "rerank": frozenset(),
    "whisper": frozenset({"av"}),  # decodes the first request's audio
    "tts": frozenset({"av", "numpy"}),  # encodes the first answer (mp3 by default)
    "image": frozenset({"PIL"}),  # writes the first picture
}
"""Per kind, the packages its worker may import at start beyond its floor."""

NOT_AT_START: dict[str, frozenset[str]] = {
    "lm": frozenset({"gguf", "llguidance", "av", "scipy", "numba", "torch"}),
    "vlm": frozenset({"gguf", "llguidance", "av", "scipy", "numba", "torch"}),
    "whisper": frozenset({"scipy", "numba", "torch"}),
}
"""Packages a kind must not import at start even where its floor would."""

SCRIPT = """
import json, sys, importlib
sys.path[:0] = {path!r}
from mlx_gateway.workers.runtime.packages import skip_package_init
before = set(sys.modules)
{body}
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def tops(modules: list[str]) -> set[str]:
    """The top-level packages of ``modules``, the standard library's and private ones
    (``_cython_…``: a compiled extension's helpers) left out."""
    names = {m.split(".")[0] for m in modules} - set(sys.stdlib_module_names)
    return {n for n in names if not n.startswith("_")}


def started(body: str) -> tuple[set[str], dict[str, float]]:
    """Run ``body`` after the runtime's import in a fresh interpreter: the top-level
    packages it imported, and each one's cumulative import time in seconds."""
    script = SCRIPT.format(path=sys.path[:1], body=body)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    seconds: dict[str, float] = {}
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _self, cumulative, name = line[len("import time:") :].split("|")
            if not name.strip().startswith("self") and cumulative.strip().isdigit():
                top = name.strip().split(".")[0]
                seconds[top] = max(seconds.get(top, 0.0), int(cumulative) / 1e6)
    return tops(json.loads(done.stdout.splitlines()[-1])), seconds


def floor_body(kind: str) -> str:
    bare = "".join(f"skip_package_init({p!r})\n" for p in BARE_PACKAGES.get(kind, ()))
    imports = "".join(f"importlib.import_module({m!r})\n" for m in FLOORS[kind])
    return f"{RUNTIME}\n{bare}{imports}"


def start_body(kind: str) -> str:
    return (
        f"{RUNTIME}\nfrom mlx_gateway.workers.runtime.extras import create_backend\n"
        f"create_backend({kind!r})\n"
    )


def installed(kind: str) -> bool:
    from mlx_gateway.protocol.kinds import KINDS

    return all(importlib.util.find_spec(m) is not None for m in KINDS[kind].extra.modules)


@pytest.mark.parametrize("kind", sorted(FLOORS))
def test_a_worker_imports_only_its_floor_and_stated_extras_at_start(kind: str) -> None:
    if not installed(kind):
        pytest.skip(f"the {kind} backend is not installed")
    floor, _ = started(floor_body(kind))
    start, seconds = started(start_body(kind))
    added = start - floor - EXTRAS[kind] - {"mlx_gateway"}
    banned = start & NOT_AT_START.get(kind, frozenset())
    described = ", ".join(f"{t} ({seconds.get(t, 0.0):.3f} s)" for t in sorted(added | banned))
    assert not added and not banned, (
        f"a {kind} worker's start imports {described}: beyond its floor "
        f"{FLOORS[kind]} and EXTRAS; make it lazy, or state it in EXTRAS"
    )


def test_word_timings_still_import_after_a_bare_whisper_start() -> None:
    if not installed("whisper"):
        pytest.skip("the whisper backend is not installed")
    body = start_body("whisper") + "from mlx_whisper.timing import add_word_timestamps\n"
    start, _ = started(body)
    assert {"scipy", "numba"} <= start  # imported when a request asks for words
