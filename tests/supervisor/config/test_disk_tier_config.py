"""The prompt cache's disk tier and the spare workers in the config: the keys, their
defaults, bad sizes, and what a language-model worker is told."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from mlx_gateway.supervisor.config import ConfigError, load_config
from mlx_gateway.supervisor.config.kinds.lm import disk_tier_options


def load(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "config.yaml"
    path.write_text(textwrap.dedent(text))
    return load_config(path)


def test_no_directory_no_disk_tier(tmp_path: Path) -> None:
    config = load(tmp_path, "models:\n  - model_path: org/m\n")
    assert config.server.spare_workers is False
    assert disk_tier_options(config.models[0], config.server) == {}


def test_server_directory_and_a_model_cap_below_the_server_cap(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        """
        server:
          prompt_cache_dir: /var/kv
          prompt_cache_disk_bytes: 2GiB
          spare_workers: true
        models:
          - model_path: org/a
          - model_path: org/b
            prompt_cache_disk_bytes: 512MiB
          - model_path: org/c
            prompt_cache_dir: /fast/kv
            prompt_cache_disk_bytes: 64GiB
        """,
    )
    a, b, c = (disk_tier_options(m, config.server) for m in config.models)
    assert config.server.spare_workers is True
    assert a == {
        "prompt_cache_dir": "/var/kv",
        "prompt_cache_disk_bytes": 2 * 2**30,
        "prompt_cache_dir_bytes": 2 * 2**30,
    }
    assert b["prompt_cache_disk_bytes"] == 512 * 2**20
    assert c["prompt_cache_dir"] == "/fast/kv"
    assert c["prompt_cache_disk_bytes"] == 2 * 2**30  # never above the server's cap


def test_mlx_openai_server_prompt_cache_dir_is_used_now(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = load(tmp_path, "models:\n  - model_path: org/m\n    prompt_cache_dir: /kv\n")
    assert config.models[0].prompt_cache_dir == "/kv"
    assert "prompt_cache_dir" not in caplog.text  # no "accepted, not used" warning


def test_a_bad_size_names_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="prompt_cache_disk_bytes"):
        load(tmp_path, "models:\n  - model_path: org/m\n    prompt_cache_disk_bytes: lots\n")
