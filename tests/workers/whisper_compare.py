"""Transcribe one audio file twice, with ``mlx_whisper.transcribe`` and with our
window-by-window :class:`~mlx_gateway.workers.whisper.transcriber.Transcriber`, on the same
model; used in-process and, for the real model, as a subprocess that can run with
OpenBLAS preloaded::

    python -m tests.workers.whisper_compare MODEL_DIR AUDIO_FILE '{"word_timestamps": true}'

prints ``{"library": {...}, "ours": {...}, "windows": N}`` as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx_whisper
import numpy as np
from mlx.utils import tree_map
from mlx_whisper.load_models import load_model
from mlx_whisper.transcribe import ModelHolder

from mlx_gateway.workers.common.audio import decode_audio
from mlx_gateway.workers.whisper.mel import MelBuilder
from mlx_gateway.workers.whisper.transcriber import Options, Transcriber

LIBRARY_NAMES = {"prompt": "initial_prompt"}
"""Our option names that mlx_whisper.transcribe spells differently."""


def load(path: Path) -> Any:
    """The model in float32, cached where ``mlx_whisper.transcribe`` looks, so both
    sides use the very same weights."""
    model = load_model(str(path), dtype=mx.float32)
    model.update(
        tree_map(
            lambda a: a.astype(mx.float32) if mx.issubdtype(a.dtype, mx.floating) else a,
            model.parameters(),
        )
    )
    ModelHolder.model, ModelHolder.model_path = model, str(path)
    return model


def compare(path: Path, audio: np.ndarray, seed: int = 3, **options: Any) -> dict[str, Any]:
    model = load(path)
    library_options = {LIBRARY_NAMES.get(k, k): v for k, v in options.items()}
    if "temperature" not in options:  # our 0 means the library's fallback sequence
        library_options["temperature"] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    mx.random.seed(seed)
    library = mlx_whisper.transcribe(
        audio, path_or_hf_repo=str(path), fp16=False, **library_options
    )
    mx.random.seed(seed)
    builder = MelBuilder(model.dims.n_mels)
    builder.add(audio)
    transcriber = Transcriber(model, builder.finish(), Options(**options), mx.float32)
    windows = 0
    while not transcriber.done:
        transcriber.step()
        windows += 1
    ours = {"text": transcriber.text(), "segments": transcriber.segments}
    return {"library": library, "ours": ours, "windows": windows}


def main() -> None:
    model, audio_file, options = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    audio = np.concatenate(list(decode_audio(Path(audio_file).read_bytes())))
    result = compare(Path(model), audio, **options)
    print(json.dumps(result, default=float))


if __name__ == "__main__":
    main()
