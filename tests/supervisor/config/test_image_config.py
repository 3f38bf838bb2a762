"""Image model entries: their keys, checks and what their worker is told."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mlx_gateway.supervisor.config import ConfigError, load_config
from mlx_gateway.supervisor.config.kinds.image import is_edit_model, parse_size
from mlx_gateway.supervisor.pool.worker_spec import spec_for


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def test_an_image_entry_becomes_worker_options(tmp_path: Path) -> None:
    (tmp_path / "style.safetensors").write_bytes(b"")
    path = write(
        tmp_path,
        """
        models:
          - model_path: mlx-community/flux2-klein-4b-4bit
            served_model_name: klein
            model_type: image-edit
            config_name: flux2-klein-4b
            quantize: 8
            lora_paths: [./style.safetensors, some-org/some-lora]
            lora_scales: [0.5, 1]
            model_config:
              transformer_overrides: {num_layers: 1}
            steps: 6
            guidance: 1.5
            size: 768x512
            max_output_pixels: 1048576
        """,
    )
    (model,) = load_config(path).models
    assert model.worker_kind == "image" and is_edit_model(model)
    spec = spec_for(model, "w1")
    assert spec.kind == "image"
    assert spec.options == {
        "mode": "edit",
        "width": 768,
        "height": 512,
        "max_pixels": 1048576,
        "config_name": "flux2-klein-4b",
        "quantize": 8,
        "lora_paths": [str(tmp_path / "style.safetensors"), "some-org/some-lora"],
        "lora_scales": [0.5, 1.0],
        "model_config": {"transformer_overrides": {"num_layers": 1}},
        "steps": 6,
        "guidance": 1.5,
    }


def test_defaults_leave_the_choices_to_the_worker(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        models:
          - model_path: mlx-community/flux2-klein-4b-4bit
            model_type: image
        """,
    )
    (model,) = load_config(path).models
    assert not is_edit_model(model)
    assert model.worker_options() == {
        "mode": "generate",
        "width": 1024,
        "height": 1024,
        "max_pixels": 2048 * 2048,
    }


@pytest.mark.parametrize(
    ("lines", "key", "words"),
    [
        ("quantize: 7", "quantize", "7 is not allowed"),
        ("lora_paths: [a/b, c/d]\nlora_scales: [1]", "lora_scales", "one scale per entry"),
        ("lora_paths: [./missing.safetensors]", "lora_paths[0]", "does not exist"),
        ("size: 1000x1000", "size", "multiples of 16"),
        ("size: 4096x4096", "size", "max_output_pixels"),
        ("size: large", "size", "expected 'WIDTHxHEIGHT'"),
        ("steps: 0", "steps", ">= 1"),
    ],
)
def test_bad_image_keys_name_their_line(tmp_path: Path, lines: str, key: str, words: str) -> None:
    extra = textwrap.indent(lines, "    ")
    path = write(
        tmp_path,
        "models:\n  - model_path: org/flux\n    model_type: image-generation\n" + extra + "\n",
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(f"models[0].{key} at {path}:")
    assert words in str(info.value)


def test_parse_size() -> None:
    assert parse_size("512x768") == (512, 768)
    assert parse_size(" 16X16 ") == (16, 16)
    for bad in ("", "16", "x16", "16x", "-16x16", "0x16", "1.5x2", "16x16x16"):
        assert parse_size(bad) is None


@pytest.mark.parametrize(
    ("name", "model_type", "sent"),
    [
        ("flux-kontext-dev", "image-edit", "dev-kontext"),
        ("flux2-klein-edit-9b", "image-edit", "flux2-klein-9b"),
        ("flux-schnell", "image-generation", "schnell"),
        ("flux2-klein-9b", "image-generation", "flux2-klein-9b"),
        ("klein-9b", "image-generation", "klein-9b"),  # mflux's own aliases pass through
    ],
)
def test_mlx_openai_server_preset_names_reach_the_worker_as_mflux_keys(
    tmp_path: Path, name: str, model_type: str, sent: str
) -> None:
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: some-org/weights
            model_type: {model_type}
            config_name: {name}
        """,
    )
    (model,) = load_config(path).models
    assert model.config_name == name  # the entry keeps what was written
    assert model.worker_options()["config_name"] == sent


@pytest.mark.parametrize("name", ["flux-kontext-dev", "flux2-klein-edit-4b", "qwen-image-edit"])
def test_an_edit_preset_name_needs_model_type_image_edit(tmp_path: Path, name: str) -> None:
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: some-org/weights
            model_type: image-generation
            config_name: {name}
        """,
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "config_name" in message and "model_type: image-edit" in message, message
