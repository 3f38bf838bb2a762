"""Which mflux pipeline serves which preset, and how an entry's overrides apply."""

from __future__ import annotations

import pytest

from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.workers.image.families import (
    FAMILIES,
    import_object,
    pipeline_class,
    resolve_preset,
)
from mlx_gateway.workers.runtime.contract import LoadError

# Imports mflux and every pipeline module it names (seconds).
pytestmark = pytest.mark.slow


def test_every_family_names_real_mflux_objects() -> None:
    from mflux.models.common.config.model_config import AVAILABLE_MODELS

    for key, family in FAMILIES.items():
        assert key in AVAILABLE_MODELS
        for ref in (family.generator, family.editor, family.latent_creator):
            if ref is not None:
                assert callable(import_object(ref)), ref


@pytest.mark.parametrize(
    ("config_name", "model_path", "key"),
    [
        ("flux2-klein-4b", "/models/anything", "flux2-klein-4b"),
        ("klein-9b", "/models/anything", "flux2-klein-9b"),
        ("kontext", "/models/anything", "dev-kontext"),
        (None, "mlx-community/flux2-klein-4b-4bit", "flux2-klein-4b"),
        (None, "mlx-community/qwen-image-edit-2511-8bit", "qwen-image-edit-2511"),
        (None, "filipstrand/Z-Image-Turbo-mflux-4bit", "z-image-turbo"),
    ],
)
def test_presets_resolve(config_name: str | None, model_path: str, key: str) -> None:
    assert resolve_preset(config_name, model_path, {}).key == key


def test_unknown_presets_say_what_to_set() -> None:
    with pytest.raises(LoadError, match="config_name 'flux9' is not an mflux preset"):
        resolve_preset("flux9", "/models/x", {})
    with pytest.raises(LoadError, match="cannot be told from its name; set config_name"):
        resolve_preset(None, "/models/my-finetune", {})


def test_overrides_apply_to_a_copy() -> None:
    from mflux.models.common.config.model_config import AVAILABLE_MODELS

    preset = resolve_preset(
        "flux2-klein-4b",
        "/x",
        {"transformer_overrides": {"num_layers": 1}, "max_sequence_length": 64},
    )
    config = preset.model_config
    assert config.transformer_overrides["num_layers"] == 1
    assert config.transformer_overrides["joint_attention_dim"] == 7680  # merged, kept
    assert config.max_sequence_length == 64
    shared = AVAILABLE_MODELS["flux2-klein-4b"]
    assert (shared.transformer_overrides["num_layers"], shared.max_sequence_length) == (5, 512)
    with pytest.raises(LoadError, match="'layers' is not a field of mflux's ModelConfig"):
        resolve_preset("flux2-klein-4b", "/x", {"layers": 1})


def test_a_preset_without_the_pipeline_names_the_other_model_type() -> None:
    kontext = resolve_preset("dev-kontext", "/x", {})
    with pytest.raises(
        LoadError, match="cannot generate images from text alone; use model_type image-edit"
    ):
        pipeline_class(kontext, "generate")
    schnell = resolve_preset("schnell", "/x", {})
    with pytest.raises(LoadError, match="cannot edit images; use model_type image-generation"):
        pipeline_class(schnell, "edit")
    assert (
        pipeline_class(resolve_preset("flux2-klein-4b", "/x", {}), "edit").__name__
        == "Flux2KleinEdit"
    )


# Every ``--config-name`` of mlx-openai-server (its IMAGE_CONFIG_NAMES) with the model
# it loads there: the model_type it implies, mflux's Hugging Face repo of those weights
# and the pipeline class that serves them.
MLX_OPENAI_SERVER_PRESETS = [
    ("flux-schnell", "image-generation", "black-forest-labs/FLUX.1-schnell", "Flux1"),
    ("flux-dev", "image-generation", "black-forest-labs/FLUX.1-dev", "Flux1"),
    ("flux-krea-dev", "image-generation", "black-forest-labs/FLUX.1-Krea-dev", "Flux1"),
    ("flux-kontext-dev", "image-edit", "black-forest-labs/FLUX.1-Kontext-dev", "Flux1Kontext"),
    ("qwen-image", "image-generation", "Qwen/Qwen-Image-2512", "QwenImage"),
    ("qwen-image-edit", "image-edit", "Qwen/Qwen-Image-Edit-2509", "QwenImageEdit"),
    ("fibo", "image-generation", "briaai/FIBO", "FIBO"),
    ("z-image-turbo", "image-generation", "Tongyi-MAI/Z-Image-Turbo", "ZImage"),
    ("flux2-klein-4b", "image-generation", "black-forest-labs/FLUX.2-klein-4B", "Flux2Klein"),
    ("flux2-klein-9b", "image-generation", "black-forest-labs/FLUX.2-klein-9B", "Flux2Klein"),
    ("flux2-klein-edit-4b", "image-edit", "black-forest-labs/FLUX.2-klein-4B", "Flux2KleinEdit"),
    ("flux2-klein-edit-9b", "image-edit", "black-forest-labs/FLUX.2-klein-9B", "Flux2KleinEdit"),
]


@pytest.mark.parametrize(
    ("name", "model_type", "repo", "pipeline"),
    MLX_OPENAI_SERVER_PRESETS,
    ids=[row[0] for row in MLX_OPENAI_SERVER_PRESETS],
)
def test_every_mlx_openai_server_preset_loads_its_model(
    name: str, model_type: str, repo: str, pipeline: str
) -> None:
    # What the gateway tells the worker (supervisor/config/kinds/image.py), then what the
    # worker makes of it with mflux's own registry.
    entry = model_entry(model_path="/models/weights", model_type=model_type, config_name=name)
    options = entry.worker_options()
    preset = resolve_preset(options["config_name"], "/models/weights", {})
    assert preset.model_config.model_name == repo
    assert pipeline_class(preset, options["mode"]).__name__ == pipeline
