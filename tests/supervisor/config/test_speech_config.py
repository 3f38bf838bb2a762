"""Config keys of speech-to-text (whisper) models."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mlx_gateway.supervisor.config import ConfigError, config_from_model_path, load_config

WHISPER = "mlx-community/whisper-large-v3-turbo"


def test_whisper_models_are_served_with_an_upload_limit(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            models:
              - model_path: {WHISPER}
                model_type: whisper
                max_upload_mb: 25
              - model_path: {WHISPER}
                served_model_name: default-limit
                model_type: whisper
            """
        )
    )
    limited, default = load_config(path).models
    assert (limited.worker_kind, limited.max_upload_mb) == ("whisper", 25)
    assert default.max_upload_mb == 100


@pytest.mark.parametrize("value", [0, -1, "big"])
def test_bad_upload_limits_name_the_key(value: object) -> None:
    with pytest.raises(
        ConfigError, match=r"^models\[0\]\.max_upload_mb \(model .*\): expected a number"
    ):
        config_from_model_path(WHISPER, "whisper", model_options={"max_upload_mb": value})
