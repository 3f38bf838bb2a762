"""Config keys of vision models (model_type vlm / multimodal), and what reaches
their worker and the gateway's image fetcher."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mlx_gateway.supervisor.config import ConfigError, config_from_model_path, load_config
from mlx_gateway.supervisor.engine.media_policy import media_policy
from mlx_gateway.supervisor.engine.media_table import IMAGE, VIDEO
from mlx_gateway.supervisor.engine.url_reader import MIB
from mlx_gateway.supervisor.pool.worker_spec import spec_for

VLM = "mlx-community/Qwen2-VL-2B-Instruct-4bit"


def test_vision_keys(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            server:
              allow_private_image_urls: true
            models:
              - model_path: {VLM}
                model_type: multimodal
                max_image_mb: 5
                max_images: 2
                image_fetch_timeout: 3s
                allow_private_image_urls: false
                resize_shape: [448, 336]
                max_pixels: 1000000
                prefix_cache: false
                fps: 2
                max_frames: 8
                max_video_mb: 10
                max_video_seconds: 1m
                local_video_dirs: [{tmp_path}]
              - model_path: {VLM}
                served_model_name: defaults
                model_type: vlm
                resize_shape: [512]
            """
        )
    )
    config = load_config(path)
    tuned, default = config.models
    assert tuned.worker_kind == default.worker_kind == "vlm"
    assert (tuned.max_images, tuned.image_fetch_timeout) == (2, 3.0)

    policy = media_policy(tuned, config.server).of(IMAGE)
    assert (policy.max_bytes, policy.timeout, policy.allow_private) == (5 * MIB, 3.0, False)
    assert media_policy(default, config.server).of(IMAGE).allow_private is True  # from server:

    spec = spec_for(tuned, "w")
    assert spec.kind == "vlm"
    assert spec.options == {
        "prefix_cache": False,
        "resize_shape": [448, 336],
        "max_pixels": 1_000_000,
        "stream_interval": 0.02,
        "video_fps": 2.0,
        "max_frames": 8,
        "max_video_seconds": 60.0,
    }
    assert default.worker_options() == {
        "prefix_cache": True,
        "resize_shape": [512, 512],
        "stream_interval": 0.02,
        "video_fps": 1.0,
        "max_frames": 16,
        "max_video_seconds": 600.0,
    }
    videos = media_policy(tuned, config.server).of(VIDEO)
    assert (videos.max_bytes, videos.timeout, videos.allow_private) == (10 * MIB, 3.0, False)
    assert videos.local_dirs == (tmp_path.resolve(),)
    assert media_policy(default, config.server).of(VIDEO).local_dirs == ()
    assert media_policy(tuned, config.server).counts == {IMAGE: 2, VIDEO: 2}


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("resize_shape", [0, 10], "expected an integer >= 1"),
        ("resize_shape", [1, 2, 3], "expected a list of at most 2 items"),
        ("resize_shape", [], "expected a non-empty list"),
        ("max_pixels", 0, "expected an integer >= 1"),
        ("max_images", 0, "expected an integer >= 1"),
        ("max_image_mb", 0, "expected a number > 0"),
        ("fps", 0, "expected a number > 0"),
        ("max_frames", 0, "expected an integer >= 1"),
        ("max_video_mb", 0, "expected a number > 0"),
    ],
)
def test_bad_values_name_the_key(key: str, value: object, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_model_path(VLM, "vlm", model_options={key: value})
    assert f"models[0].{key}" in str(caught.value)
    assert words in str(caught.value)


@pytest.mark.parametrize(
    ("key", "value"),
    [("resize_shape", [64, 64]), ("prefix_cache", False), ("max_images", 2), ("max_frames", 4)],
)
def test_vision_keys_on_other_models_are_errors(key: str, value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_model_path(VLM, "lm", model_options={key: value})
    assert f"{key} applies to vision models (model_type vlm, multimodal) only" in str(caught.value)
