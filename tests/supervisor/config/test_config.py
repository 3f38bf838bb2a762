"""supervisor/config.py: YAML → Structs, and errors that point at the file line."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from mlx_gateway.supervisor.config import (
    MODEL_TYPES,
    ConfigError,
    GatewayConfig,
    ServerConfig,
    load_config,
)
from mlx_gateway.supervisor.config.kinds import model_entry

DATA = Path(__file__).parent.parent / "data"
REPO = Path(__file__).resolve().parents[3]
HF_ID = "mlx-community/Qwen3-0.6B-4bit"


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def load(tmp_path: Path, text: str, name: str = "config.yaml") -> GatewayConfig:
    """``text`` written to ``tmp_path / name`` and loaded."""
    return load_config(write(tmp_path, text, name))


def error_of(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return info.value


# --------------------------------------------------------------------------- defaults


def test_minimal_config_gets_the_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, f"models:\n  - model_path: {HF_ID}\n")
    assert config.server == ServerConfig()
    assert config.server.host == "127.0.0.1"
    assert config.server.port == 8000
    assert config.server.log_level == "info"
    assert config.server.runtime_dir is None
    assert config.server.start_timeout == 600
    assert config.server.shutdown_grace == 5
    (model,) = config.models
    assert model.model_path == HF_ID  # a repo id is kept as written
    assert model.served_model_name == HF_ID
    assert model.names == (HF_ID,)
    assert model.model_type == "lm"
    assert model.worker_kind == "lm"
    assert model.on_demand is True
    assert model.idle_timeout == 300
    assert model.start_timeout is None
    assert model.effective_start_timeout(config.server) == 600
    assert (model.max_concurrency, model.prefill_batch_size, model.prefill_step_size) == (
        8,
        8,
        2048,
    )
    for field in ("context_length", "max_tokens", "temperature", "top_p", "top_k", "min_p"):
        assert getattr(model, field) is None
    assert model.repetition_penalty is None
    assert model.chat_template_file is None
    assert model.trust_remote_code is False
    assert model.python is None
    assert model.worker_env == {}


def test_full_config_of_our_own_keys(tmp_path: Path) -> None:
    (tmp_path / "tpl.jinja").write_text("{{ messages }}")
    config = load(
        tmp_path,
        f"""
        server:
          host: 0.0.0.0
          port: 9000
          log_level: WARNING
          runtime_dir: run
          start_timeout: 20m
          shutdown_grace: 2.5
        models:
          - model_path: {HF_ID}
            served_model_name: qwen
            aliases: [q, small]
            model_type: lm
            on_demand: false
            idle_timeout: 0
            start_timeout: 1h30m
            context_length: 4096
            max_tokens: 512
            temperature: 0
            top_p: 1
            top_k: 40
            min_p: 0.05
            repetition_penalty: 1.1
            chat_template_file: tpl.jinja
            trust_remote_code: true
            max_concurrency: 4
            prefill_batch_size: 2
            prefill_step_size: 512
            python: {sys.executable}
            worker_env:
              HF_HUB_OFFLINE: 1
              NAME: value
        """,
    )
    server = config.server
    assert (server.host, server.port, server.log_level) == ("0.0.0.0", 9000, "warning")
    assert server.runtime_dir == str(tmp_path / "run")
    assert (server.start_timeout, server.shutdown_grace) == (1200, 2.5)
    (m,) = config.models
    assert m.names == ("qwen", "q", "small")
    assert (m.on_demand, m.idle_timeout, m.start_timeout) == (False, 0, 5400)
    assert m.effective_start_timeout(server) == 5400
    assert (m.context_length, m.max_tokens, m.temperature, m.top_p) == (4096, 512, 0, 1)
    assert (m.top_k, m.min_p, m.repetition_penalty) == (40, 0.05, 1.1)
    assert m.chat_template_file == str(tmp_path / "tpl.jinja")
    assert m.trust_remote_code is True
    assert (m.max_concurrency, m.prefill_batch_size, m.prefill_step_size) == (4, 2, 512)
    assert m.python == os.path.abspath(sys.executable)
    assert m.worker_env == {"HF_HUB_OFFLINE": "1", "NAME": "value"}


def test_model_types_keep_their_worker_kinds() -> None:
    assert MODEL_TYPES["multimodal"] == MODEL_TYPES["vlm"] == "vlm"
    assert MODEL_TYPES["image-generation"] == MODEL_TYPES["image-edit"] == "image"
    assert model_entry(model_path="a/b", model_type="multimodal").worker_kind == "vlm"


def test_structs_built_in_code_default_the_served_name() -> None:
    model = model_entry(model_path="org/name", aliases=["x"])
    assert model.served_model_name == "org/name"
    assert model.names == ("org/name", "x")
    config = GatewayConfig(models=[model])
    assert config.server.port == 8000


def test_example_config_loads() -> None:
    config = load_config(REPO / "config.example.yaml")
    assert len(config.models) >= 2
    for model in config.models:
        assert model.on_demand is True
        assert model.model_path.startswith("mlx-community/")  # HF ids, kept as is
        assert model.worker_kind in MODEL_TYPES.values()
    assert {"embeddings", "image", "vlm"} <= {model.worker_kind for model in config.models}
    names = [name for model in config.models for name in model.names]
    assert len(names) == len(set(names))


# --------------------------------------------------------------------------- paths


def test_relative_local_paths_resolve_against_the_config_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf_dir = tmp_path / "conf"
    (conf_dir / "models" / "tiny").mkdir(parents=True)
    (tmp_path / "shared" / "org" / "deep").mkdir(parents=True)
    (conf_dir / "plain").mkdir()
    path = write(
        conf_dir,
        """
        models:
          - model_path: ./models/tiny
          - model_path: ../shared/org/deep
          - model_path: plain
        """,
    )
    monkeypatch.chdir(tmp_path)  # the working directory must not matter
    config = load_config(path)
    assert [m.model_path for m in config.models] == [
        str(conf_dir / "models" / "tiny"),
        str(tmp_path / "shared" / "org" / "deep"),
        str(conf_dir / "plain"),  # no slash, but exists next to the config
    ]
    # the served name defaults to the path as written, not the absolute one
    assert config.models[0].served_model_name == "./models/tiny"


def test_home_relative_path_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "weights").mkdir()
    config = load(tmp_path, "models:\n  - model_path: ~/weights\n", "c.yaml")
    assert config.models[0].model_path == str(tmp_path / "weights")


@pytest.mark.parametrize("written", ["./missing", "/nonexistent/model", "a/b/c", "~/nope-xyz"])
def test_missing_local_model_path_is_an_error(tmp_path: Path, written: str) -> None:
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: {HF_ID}
          - model_path: {written}
            served_model_name: local
        """,
    )
    err = error_of(path)
    assert err.line == 3
    assert err.model_index == 1
    assert err.key == "models[1].model_path"
    assert f"models[1].model_path at {path}:3 (model 'local')" in str(err)
    assert "does not exist" in str(err)
    assert "org/name" in str(err)  # says what else it could be


def test_model_path_that_is_a_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "weights.safetensors").write_text("")
    err = error_of(write(tmp_path, "models:\n  - model_path: ./weights.safetensors\n"))
    assert err.line == 2
    assert "is not a directory" in str(err)


def test_missing_chat_template_is_an_error(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: {HF_ID}
            chat_template_file: templates/missing.jinja
        """,
    )
    err = error_of(path)
    assert err.line == 3
    assert "models[0].chat_template_file" in str(err)
    assert str(tmp_path / "templates" / "missing.jinja") in str(err)


def test_python_interpreter_must_exist(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: {HF_ID}
            python: .venv-other/bin/python
        """,
    )
    err = error_of(path)
    assert err.line == 3
    assert "models[0].python" in str(err)
    assert "does not exist" in str(err)
    err = error_of(write(tmp_path, f"models:\n  - model_path: {HF_ID}\n    python: no-such-py\n"))
    assert "not on PATH" in str(err)


# --------------------------------------------------------------------------- key errors


def test_unknown_key_names_the_entry_and_line_and_suggests(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: {HF_ID}
          - model_path: mlx-community/Llama-3.2-1B-Instruct-4bit
            served_model_name: qwen-2
            temprature: 0.5
        """,
    )
    err = error_of(path)
    assert str(err) == (
        f"unknown key 'temprature' in models[1] ('qwen-2') at {path}:5; did you mean 'temperature'?"
    )
    assert (err.line, err.key, err.model_index) == (5, "models[1].temprature", 1)


def test_unknown_server_key(tmp_path: Path) -> None:
    path = write(tmp_path, f"server:\n  prot: 80\nmodels:\n  - model_path: {HF_ID}\n")
    err = error_of(path)
    assert str(err) == f"unknown key 'prot' in server at {path}:2; did you mean 'port'?"
    assert err.line == 2


def test_unknown_top_level_key(tmp_path: Path) -> None:
    path = write(tmp_path, f"modles: []\nmodels:\n  - model_path: {HF_ID}\n")
    err = error_of(path)
    assert str(err) == f"unknown key 'modles' at {path}:1; did you mean 'models'?"


def test_key_in_the_wrong_section_says_where_it_belongs(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, f"models:\n  - model_path: {HF_ID}\n    shutdown_grace: 3\n"))
    assert err.line == 3
    assert "move it under 'server:'" in str(err)
    err = error_of(
        write(tmp_path, f"server:\n  temperature: 0.2\nmodels:\n  - model_path: {HF_ID}\n")
    )
    assert err.line == 2
    assert "move it into an entry of 'models:'" in str(err)


def test_duplicate_yaml_key_is_an_error(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: {HF_ID}
            temperature: 0.5
            temperature: 0.7
        """,
    )
    err = error_of(path)
    assert err.line == 4
    assert "duplicate key 'temperature'" in str(err)
    assert "line 3" in str(err)


def test_yaml_anchors_in_x_keys_and_merges(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        f"""
        x-defaults: &defaults
          model_path: {HF_ID}
          temperature: 0.5
          max_tokens: 100
        models:
          - <<: *defaults
          - <<: *defaults
            served_model_name: other
            temperature: 0.9
        """,
    )
    assert [(m.served_model_name, m.temperature, m.max_tokens) for m in config.models] == [
        (HF_ID, 0.5, 100),
        ("other", 0.9, 100),
    ]


def test_nested_merges_are_not_duplicate_keys(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        f"""
        x-base: &base
          model_path: {HF_ID}
          temperature: 0.1
        x-warm: &warm
          <<: *base
          temperature: 0.8
        models:
          - <<: *warm
            max_tokens: 5
        """,
    )
    assert (config.models[0].temperature, config.models[0].max_tokens) == (0.8, 5)


def test_two_spellings_of_one_setting_conflict(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: {HF_ID}
            temperature: 0.5
            default_temperature: 0.7
        """,
    )
    err = error_of(path)
    assert err.line == 4
    assert "'temperature' (line 3) already sets temperature" in str(err)
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: {HF_ID}
            default_temperature: 0.7
            temperature: 0.5
        """,
    )
    err = error_of(path)
    assert (err.line, err.key) == (4, "models[0].temperature")
    assert "'default_temperature' (line 3) already sets temperature" in str(err)


# --------------------------------------------------------------------------- value errors


def test_wrong_type_names_key_line_and_value(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: {HF_ID}
            served_model_name: qwen
            idle_timeout: soon
        """,
    )
    err = error_of(path)
    assert str(err).startswith(
        f"models[0].idle_timeout at {path}:4 (model 'qwen'): expected a number, got 'soon'"
    )
    assert (err.line, err.key) == (4, "models[0].idle_timeout")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("temperature: -0.1", "expected a number >= 0, got -0.1"),
        ("top_p: 0", "expected a number > 0, got 0"),
        ("top_p: 1.5", "expected a number <= 1, got 1.5"),
        ("min_p: 2", "expected a number <= 1, got 2"),
        ("top_k: -1", "expected an integer >= 0, got -1"),
        ("repetition_penalty: 0", "expected a number > 0, got 0"),
        ("max_concurrency: 0", "expected an integer >= 1, got 0"),
        ("max_concurrency: 1.5", "expected an integer, got 1.5"),
        ("prefill_step_size: big", "expected an integer, got 'big'"),
        ("context_length: 0", "expected an integer >= 1, got 0"),
        ("max_tokens: -5", "expected an integer >= 1, got -5"),
        ("idle_timeout: -1", "expected a number >= 0, got -1"),
        ("start_timeout: 0", "expected a number > 0, got 0"),
        ("on_demand: maybe", "expected true or false, got 'maybe'"),
        ("trust_remote_code: 1", "expected true or false, got 1"),
        ("aliases: qwen", "expected a list, got 'qwen'"),
        ("aliases: [1.5]", "expected a string, got 1.5"),
        ("worker_env: [A]", "expected a mapping of NAME: value, got a list"),
        ("worker_env: {A: yes}", "expected a string, got true; quote the value"),
        ("chat_template_file: 3", "expected a string, got 3"),
        ("model_type: 7", "expected a string, got 7"),
        ("max_tokens_overflow: cut", "'cut' is not allowed; use one of: clamp, error"),
        ("context_overflow: drop", "'drop' is not allowed; use one of: error, truncate, summarize"),
        ("kv_bits: 3", "3 is not allowed; use one of: 4, 8"),
    ],
)
def test_out_of_range_and_wrong_type_values(tmp_path: Path, line: str, expected: str) -> None:
    path = write(tmp_path, f"models:\n  - model_path: {HF_ID}\n    {line}\n")
    err = error_of(path)
    key = line.split(":")[0]
    assert err.line == 3
    assert f"models[0].{key}" in str(err)
    assert f"at {path}:3 (model '{HF_ID}'): " in str(err)
    assert expected in str(err)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("port: 70000", "expected an integer <= 65535, got 70000"),
        ("port: 0", "expected an integer >= 1, got 0"),
        ("port: '8000'", "expected an integer, got '8000'"),
        ("host: ''", "expected a non-empty string"),
        ("log_level: verbose", "'verbose' is not allowed; use one of: debug, info"),
        ("shutdown_grace: -1", "expected a number >= 0, got -1"),
        ("start_timeout: later", "expected a number, got 'later'"),
        ("stream_keepalive: 0", "expected a number >= 0.1, got 0"),
        ("stream_keepalive: 2m", "expected a number <= 60, got 120"),
    ],
)
def test_server_value_errors(tmp_path: Path, line: str, expected: str) -> None:
    path = write(tmp_path, f"server:\n  {line}\nmodels:\n  - model_path: {HF_ID}\n")
    err = error_of(path)
    assert err.line == 2
    assert str(err).startswith(f"server.{line.split(':')[0]} at {path}:2: ")
    assert expected in str(err)


def test_stream_keepalive(tmp_path: Path) -> None:
    plain = load(tmp_path, f"models:\n  - model_path: {HF_ID}\n")
    assert plain.server.stream_keepalive == 2.0
    text = f"server:\n  stream_keepalive: 5s\nmodels:\n  - model_path: {HF_ID}\n"
    assert load(tmp_path, text).server.stream_keepalive == 5.0


def test_default_keep_alive_is_the_idle_timeout_of_entries_without_one(tmp_path: Path) -> None:
    """``server.default_keep_alive``: what a request without keep_alive gets, for the
    entries that set no idle_timeout (pulled models too); an entry's own wins."""
    from mlx_gateway.supervisor.config.pulled import PulledModels, with_pulled

    text = (
        "server:\n  default_keep_alive: 10m\nmodels:\n"
        f"  - model_path: {HF_ID}\n    served_model_name: plain\n"
        f"  - model_path: {HF_ID}\n    served_model_name: own\n    idle_timeout: 30s\n"
        f"  - model_path: {HF_ID}\n    served_model_name: never\n    idle_timeout: 0\n"
    )
    config = load(tmp_path, text)
    assert config.server.default_keep_alive == 600
    assert [m.idle_timeout for m in config.models] == [600, 30, 0]
    pulled = PulledModels(models={"org/pulled": "lm"}, path=tmp_path / "pulled.json")
    (added,) = with_pulled(config, pulled).models[3:]
    assert (added.served_model_name, added.idle_timeout) == ("org/pulled", 600)
    assert load(tmp_path, f"models:\n  - model_path: {HF_ID}\n").models[0].idle_timeout == 300
    with pytest.raises(ConfigError, match="default_keep_alive"):
        load(tmp_path, f"server:\n  default_keep_alive: soon\nmodels:\n  - model_path: {HF_ID}\n")


def test_durations(tmp_path: Path) -> None:
    text = "models:\n" + "".join(
        f"  - model_path: {HF_ID}\n    served_model_name: m{i}\n    idle_timeout: {v}\n"
        for i, v in enumerate(["90s", "5m", "1h30m", "2h", "'300'", "1.5m", "10 min"])
    )
    config = load(tmp_path, text)
    assert [m.idle_timeout for m in config.models] == [90, 300, 5400, 7200, 300, 90, 600]
