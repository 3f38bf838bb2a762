"""A model's own files read by the gateway: generation_config.json's sampling
defaults under the YAML keys, and the context window from config.json."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mlx_gateway.supervisor.config.kinds import model_entry
from mlx_gateway.supervisor.pool.model_files import (
    configured_context_window,
    generation_config,
    sampling_defaults,
)


def folder(tmp_path: Path, generation: object, config: object | None = None) -> Path:
    (tmp_path / "generation_config.json").write_text(json.dumps(generation))
    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_keys_taken_and_renamed(tmp_path: Path) -> None:
    path = folder(tmp_path, {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "max_new_tokens": 64})
    assert generation_config(str(path)) == {
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": 20,
        "max_tokens": 64,
    }


def test_do_sample_false_is_greedy(tmp_path: Path) -> None:
    path = folder(tmp_path, {"do_sample": False, "temperature": 0.7})
    assert generation_config(str(path))["temperature"] == 0.0


def test_bad_values_are_left_out(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = folder(tmp_path, {"temperature": -1, "top_p": "high", "top_k": 2.5, "min_p": 0.05})
    assert generation_config(str(path)) == {"min_p": 0.05}
    assert "temperature" in caplog.text


def test_not_json_or_missing(tmp_path: Path) -> None:
    (tmp_path / "generation_config.json").write_text("{not json")
    assert generation_config(str(tmp_path)) == {}
    assert generation_config(str(tmp_path / "nowhere")) == {}


def test_yaml_keys_win(tmp_path: Path) -> None:
    path = folder(tmp_path, {"temperature": 0.6, "top_p": 0.8, "repetition_penalty": 1.1})
    defaults = sampling_defaults(model_entry(model_path=str(path), temperature=1.0))
    assert defaults.temperature == 1.0  # YAML
    assert defaults.top_p == 0.8  # file
    assert defaults.repetition_penalty == 1.1
    assert defaults.max_tokens is None  # neither


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = folder(tmp_path, {"temperature": 0.6})
    assert generation_config(str(path)) == {"temperature": 0.6}
    file = path / "generation_config.json"
    file.write_text(json.dumps({"temperature": 0.2}))
    stat = file.stat()
    os.utime(file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert generation_config(str(path)) == {"temperature": 0.2}


def test_context_window(tmp_path: Path) -> None:
    path = folder(tmp_path, {}, {"max_position_embeddings": 40960})
    assert configured_context_window(model_entry(model_path=str(path))) == 40960
    assert configured_context_window(model_entry(model_path=str(path), context_length=8192)) == 8192
    (tmp_path / "vlm").mkdir()
    nested = folder(tmp_path / "vlm", {}, {"text_config": {"max_position_embeddings": 32768}})
    assert configured_context_window(model_entry(model_path=str(nested))) == 32768
    assert configured_context_window(model_entry(model_path="org/not-downloaded")) is None
