"""The memory need of an image-embedding model: its weight files (both towers) and
one vision pass over a full batch of images, from its ``config.json``."""

from __future__ import annotations

import json
from pathlib import Path

from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.pool.memory import estimate
from mlx_gateway.supervisor.pool.vision_need import image_pass_bytes

SIGLIP_SO400M = {
    "model_type": "siglip",
    "text_config": {"hidden_size": 1152, "num_hidden_layers": 27},
    "vision_config": {
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_attention_heads": 16,
        "image_size": 384,
        "patch_size": 14,
    },
}


def folder(tmp_path: Path, config: dict[str, object], weights: int) -> Path:
    out = tmp_path / "model"
    out.mkdir()
    (out / "config.json").write_text(json.dumps(config))
    with (out / "model.safetensors").open("wb") as f:
        f.truncate(weights)  # sparse: claims the size, uses no blocks
    return out


def test_a_vision_pass_is_counted_for_an_image_embedding_model(tmp_path: Path) -> None:
    path = folder(tmp_path, SIGLIP_SO400M, 1_700_000_000)
    need = estimate(model_entry(model_path=str(path), model_type="embeddings"))
    patches = (384 // 14) ** 2  # 729
    images = 4096 // patches  # 5 images a pass by default
    per_image = patches * (16 * patches + 4304 + 3 * 1152)
    assert need.parts["images"] == images * per_image * 4 * 4
    assert need.parts["weights"] == 1_700_000_000  # the vision tower's weights included
    assert need.bytes == sum(need.parts.values())
    smaller = estimate(
        model_entry(model_path=str(path), model_type="embeddings", max_batch_tokens=729)
    )
    assert smaller.parts["images"] == per_image * 4 * 4  # one image a pass


def test_a_text_embedding_model_has_no_vision_pass(tmp_path: Path) -> None:
    config = {"model_type": "bert", "hidden_size": 384, "num_hidden_layers": 6}
    path = folder(tmp_path, config, 90_000_000)
    need = estimate(model_entry(model_path=str(path), model_type="embeddings"))
    assert "images" not in need.parts
    assert image_pass_bytes(config, None) == 0
