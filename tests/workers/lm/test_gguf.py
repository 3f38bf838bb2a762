"""GGUF → MLX conversion (workers/lm/gguf): tiny random GGUFs written by the ``gguf``
package in several tensor types and architectures are converted, loaded by mlx-lm
and compared with the same weights dequantized by NumPy in a float32 mlx-lm model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFWriter
from mlx_lm.models.cache import make_prompt_cache
from mlx_lm.utils import _get_classes, load

from mlx_gateway.workers.lm.gguf.arch import GgufError, model_config
from mlx_gateway.workers.lm.gguf.model import gguf_model
from tests.fixtures.tiny_gguf import SAMPLES, TinyGguf, build_tiny_gguf, reference_weights

T = GGMLQuantizationType
TOKENS = [5, 17, 42, 99, 3, 250, 7, 64, 128, 11, 200, 33]

# Relative logit error (max |Δ| / max |reference|): float16 arithmetic for the types MLX
# keeps as they are; plus MLX's requantization (4-bit for Q4_K, 6-bit for Q5_0: up to
# half of MLX's step per weight). Gemma runs in bfloat16, where MLX's affine
# dequantization rounds scale * q before the bias cancels it: about one step per weight.
TOLERANCE = {T.F16: 0.02, T.Q8_0: 0.02, T.Q4_0: 0.02, T.Q4_K: 0.25, T.Q5_0: 0.12}
BF16_ARCHES = ("gemma", "gemma2", "gemma3")
BF16_TOLERANCE = 0.08


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "gateway-cache"
    monkeypatch.setenv("MLX_GATEWAY_CACHE_DIR", str(folder))
    return folder


def _reference_logits(tiny: TinyGguf, undo_permute: bool = True) -> np.ndarray[Any, Any]:
    model_class, args_class = _get_classes(tiny.config)
    model = model_class(args_class.from_dict(tiny.config))
    weights = {k: mx.array(v) for k, v in reference_weights(tiny, undo_permute).items()}
    if hasattr(model, "sanitize"):
        weights = model.sanitize(weights)  # a tied Gemma 3 drops its lm_head here
    model.load_weights(list(weights.items()), strict=True)
    return _logits(model)


def _logits(model: Any) -> np.ndarray[Any, Any]:
    cache = make_prompt_cache(model)  # Gemma 3 needs one: its mask reads a layer's cache
    return np.asarray(model(mx.array([TOKENS]), cache=cache).astype(mx.float32))


def _relative_error(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def _convert(path: Path) -> tuple[Path, list[str]]:
    seen: list[str] = []
    folder = gguf_model(str(path), seen.append)
    assert folder is not None
    return folder, seen


@pytest.mark.parametrize(
    ("arch", "kind"),
    [
        ("llama", T.F16),
        ("llama", T.Q8_0),
        ("llama", T.Q4_0),
        ("llama", T.Q4_K),
        ("llama", T.Q5_0),
        ("qwen2", T.Q8_0),
        ("qwen3", T.Q4_K),
        ("qwen3moe", T.Q8_0),
        ("qwen3moe", T.Q4_K),
        ("gemma", T.Q4_0),
        ("gemma2", T.Q8_0),
        ("gemma2", T.Q4_K),
        ("gemma3", T.Q8_0),
        ("phi3", T.F16),
        # not Q4_K: MLX's 4-bit requantization of the random Q4_K blocks moves this tiny
        # Phi-3's logits by 0.28-0.31 (seeds 0-2; 0.02 when requantized at 8 bits), past
        # the Q4_K tolerance; Q5_0 takes the same requantizing path at 6 bits
        ("phi3", T.Q5_0),
        ("phi3-longrope", T.Q8_0),
        ("granite", T.Q4_0),
        ("granite", T.Q5_0),
        ("olmo2", T.Q8_0),
        ("olmo2", T.Q4_K),
    ],
)
def test_converted_logits_match_numpy_dequantized_weights(
    tmp_path: Path, arch: str, kind: T
) -> None:
    tiny = build_tiny_gguf(tmp_path / f"{arch}.gguf", arch, kind)
    folder, seen = _convert(tiny.path)
    assert seen == [f"{arch}.gguf"]
    model, tokenizer = load(str(folder))
    got = _logits(model)
    want = _reference_logits(tiny)
    assert got.shape == want.shape
    tolerance = TOLERANCE[kind] + (BF16_TOLERANCE if arch in BF16_ARCHES else 0.0)
    assert _relative_error(got, want) < tolerance

    config = json.loads((folder / "config.json").read_text())
    bits = {T.F16: None, T.Q8_0: 8, T.Q4_0: 4, T.Q4_K: 4, T.Q5_0: 6}[kind]
    if bits is None:
        assert "quantization" not in config
    else:
        assert config["quantization"]["bits"] == bits
        assert config["quantization"]["group_size"] == 32
        arrays = mx.load(str(next(folder.glob("*.safetensors"))))
        down = "model.layers.0.mlp." + ("switch_mlp." if arch == "qwen3moe" else "") + "down_proj"
        assert arrays[f"{down}.weight"].dtype == mx.uint32
        assert f"{down}.scales" in arrays

    for text in SAMPLES:
        assert tokenizer.encode(text) == tiny.tokenizer.encode(text).ids, text
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_the_comparison_tells_a_wrong_mapping(tmp_path: Path) -> None:
    """Leaving llama.cpp's interleaved q/k rows as they are is far outside the
    tolerance: the logit check above would catch a converter that forgot them."""
    tiny = build_tiny_gguf(tmp_path / "llama.gguf", "llama", T.Q8_0)
    right = _reference_logits(tiny)
    wrong = _reference_logits(tiny, undo_permute=False)
    assert _relative_error(wrong, right) > 10 * TOLERANCE[T.Q8_0]


def test_a_conversion_is_kept_and_reused_by_digest(tmp_path: Path, cache: Path) -> None:
    (tmp_path / "a").mkdir()
    tiny = build_tiny_gguf(tmp_path / "a" / "model.gguf", "qwen2", T.Q8_0)
    first, seen = _convert(tiny.path)
    assert seen == ["model.gguf"]
    again, seen_again = _convert(tiny.path.parent)  # the folder holding it names it too
    assert again == first and seen_again == []
    copy = tmp_path / "elsewhere.gguf"  # the same bytes under another name: same digest
    copy.write_bytes(tiny.path.read_bytes())
    assert _convert(copy) == (first, [])
    assert first.parent == cache / "gguf"
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".")]
    info = json.loads((first / "gguf.json").read_text())
    assert info["architecture"] == "qwen2" and info["tensor_types"]["Q8_0"] == 15


def test_an_mlx_folder_or_a_repo_id_is_not_a_gguf(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "stray.gguf").write_bytes(b"")
    assert gguf_model(str(tmp_path), print) is None
    assert gguf_model("mlx-community/Qwen3-0.6B-4bit", print) is None


def test_an_unknown_architecture_fails_naming_it(tmp_path: Path, cache: Path) -> None:
    path = tmp_path / "m.gguf"
    writer = GGUFWriter(str(path), "mamba")
    writer.add_tensor("token_embd.weight", np.zeros((8, 32), np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(GgufError, match="architecture 'mamba' cannot be converted"):
        gguf_model(str(path), print)
    assert not list((cache / "gguf").glob("[!d]*"))  # nothing but the digest memo


def test_a_split_set_needs_its_first_part(tmp_path: Path) -> None:
    (tmp_path / "m-00002-of-00002.gguf").write_bytes(b"")
    with pytest.raises(GgufError, match="give the first part"):
        gguf_model(str(tmp_path / "m-00002-of-00002.gguf"), print)
    (tmp_path / "m-00001-of-00003.gguf").write_bytes(b"")
    with pytest.raises(
        GgufError, match=r"lacks its parts m-00002-of-00003\.gguf, m-00003-of-00003\.gguf"
    ):
        gguf_model(str(tmp_path / "m-00001-of-00003.gguf"), print)


def _meta(values: dict[str, Any]) -> Any:
    def meta(key: str, default: Any) -> Any:
        return values.get(key.replace("{arch}.", ""), default)

    return meta


def _sizes(layers: int, hidden: int, heads: int, head_dim: int) -> dict[str, Any]:
    return {
        "block_count": layers,
        "embedding_length": hidden,
        "attention.head_count": heads,
        "attention.head_count_kv": heads // 2,
        "attention.key_length": head_dim,
    }


@pytest.mark.parametrize(
    ("arch", "layers", "hidden", "heads", "head_dim", "scalar"),
    [
        ("gemma2", 42, 3584, 16, 256, 256),  # Gemma 2 9B: the head size
        ("gemma2", 46, 4608, 32, 128, 144),  # Gemma 2 27B: hidden / heads
        ("gemma3", 34, 2560, 8, 256, 256),  # Gemma 3 4B
        ("gemma3", 62, 5376, 32, 128, 168),  # Gemma 3 27B
    ],
)
def test_gemma_query_scale_follows_llama_cpp_by_size(
    arch: str, layers: int, hidden: int, heads: int, head_dim: int, scalar: int
) -> None:
    """GGUF keeps no query_pre_attn_scalar; llama.cpp picks it by model size, as the
    Hugging Face configs of Gemma 2 and 3 set it (the tiny models above can't tell)."""
    config = model_config(arch, _meta(_sizes(layers, hidden, heads, head_dim)), 8, set())
    assert config["query_pre_attn_scalar"] == scalar


def test_granite_attention_scale_and_biases_come_from_the_file() -> None:
    sizes = _sizes(2, 256, 4, 64)
    del sizes["attention.key_length"]  # llama.cpp writes none for Granite
    names = {"blk.0.attn_q.bias", "blk.0.attn_k.bias", "blk.0.attn_v.bias"}
    config = model_config("granite", _meta(sizes), 8, names)
    assert config["attention_multiplier"] == 64**-0.5  # llama.cpp's default without the key
    assert config["attention_bias"] is True and config["mlp_bias"] is False
    config = model_config("granite", _meta({**sizes, "attention.scale": 0.015625}), 8, set())
    assert config["attention_multiplier"] == 0.015625
    assert config["attention_bias"] is False


def test_olmo3_written_as_olmo2_fails_naming_it() -> None:
    """llama.cpp writes OLMo 3 as ``olmo2`` with a sliding window, which mlx-lm's olmo2
    model lacks: refused rather than converted into a model that attends too far."""
    sizes = {**_sizes(4, 256, 4, 64), "attention.sliding_window": 4096}
    with pytest.raises(GgufError, match=r"'olmo2' with a sliding window \(OLMo 3\)"):
        model_config("olmo2", _meta(sizes), 8, set())
