"""The embeddings keys of a model entry: validation and what the worker is told."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mlx_gateway.supervisor.config import ConfigError, load_config
from mlx_gateway.supervisor.pool.worker_spec import spec_for


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def test_embeddings_keys_reach_the_worker(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            """
            models:
              - model_path: mlx-community/all-MiniLM-L6-v2-4bit
                model_type: embeddings
                max_batch_tokens: 1024
                truncate: true
              - model_path: mlx-community/bge-small-en-v1.5
                model_type: embeddings
            """,
        )
    )
    tuned, plain = config.models
    assert (tuned.max_batch_tokens, tuned.truncate) == (1024, True)
    assert (plain.max_batch_tokens, plain.truncate) == (None, False)
    spec = spec_for(tuned, "w1")
    assert spec.kind == "embeddings"
    assert spec.options["max_batch_tokens"] == 1024
    # Unset: the worker applies its own default.
    assert "max_batch_tokens" not in spec_for(plain, "w2").options


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "max_batch_tokens: 512",
            "max_batch_tokens applies to embeddings and rerank models (model_type embeddings, "
            "rerank) only",
        ),
        ("truncate: true", "truncate applies to embeddings models (model_type embeddings) only"),
    ],
)
def test_embeddings_keys_on_other_models_are_errors(
    tmp_path: Path, entry: str, message: str
) -> None:
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: mlx-community/Qwen3-0.6B-4bit
            {entry}
        """,
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert message in info.value.message
    assert info.value.line == 3


def test_max_batch_tokens_must_be_positive(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        models:
          - model_path: mlx-community/all-MiniLM-L6-v2-4bit
            model_type: embeddings
            max_batch_tokens: 0
        """,
    )
    with pytest.raises(ConfigError, match=r"max_batch_tokens.*>= 1"):
        load_config(path)
