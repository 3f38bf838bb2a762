"""supervisor/config.py: YAML → Structs, and errors that point at the file line."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mlx_gateway.supervisor.config import (
    MODEL_TYPES,
    SERVABLE_KINDS,
    ConfigError,
    GatewayConfig,
    ModelConfig,
    ServerConfig,
    config_from_model_path,
    load_config,
    override_server,
)
from mlx_gateway.supervisor.config import checks as config_checks
from mlx_gateway.supervisor.config.lm import worker_options as lm_worker_options

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
    assert set(SERVABLE_KINDS) <= set(MODEL_TYPES.values())
    assert ModelConfig(model_path="a/b", model_type="multimodal").worker_kind == "vlm"


def test_structs_built_in_code_default_the_served_name() -> None:
    model = ModelConfig(model_path="org/name", aliases=["x"])
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
        assert model.worker_kind in SERVABLE_KINDS
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


def test_durations(tmp_path: Path) -> None:
    text = "models:\n" + "".join(
        f"  - model_path: {HF_ID}\n    served_model_name: m{i}\n    idle_timeout: {v}\n"
        for i, v in enumerate(["90s", "5m", "1h30m", "2h", "'300'", "1.5m", "10 min"])
    )
    config = load(tmp_path, text)
    assert [m.idle_timeout for m in config.models] == [90, 300, 5400, 7200, 300, 90, 600]


# --------------------------------------------------------------------------- model types


def test_unknown_model_type_lists_the_allowed_ones(tmp_path: Path) -> None:
    path = write(tmp_path, f"models:\n  - model_path: {HF_ID}\n    model_type: lmm\n")
    err = error_of(path)
    assert err.line == 3
    assert "unknown model_type 'lmm'" in str(err)
    for kind in MODEL_TYPES:
        assert kind in str(err)


@pytest.mark.parametrize("model_type", ["image-generation", "image-edit"])
def test_known_but_not_servable_model_type(
    tmp_path: Path, model_type: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every kind is servable now; a gateway built without one still says so clearly.
    monkeypatch.setattr(config_checks, "SERVABLE_KINDS", ("lm",))
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: {HF_ID}
          - model_path: mlx-community/whisper-large-v3-mlx
            served_model_name: x
            model_type: {model_type}
        """,
    )
    err = error_of(path)
    assert err.line == 5
    assert err.model_index == 1
    assert f"models[1].model_type at {path}:5 (model 'x'): " in str(err)
    assert f"model_type '{model_type}' is not supported yet by this gateway" in str(err)


# --------------------------------------------------------------------------- names


def test_duplicate_served_names_name_both_entries(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: {HF_ID}
            served_model_name: chat
          - model_path: mlx-community/Llama-3.2-1B-Instruct-4bit
            served_model_name: chat
        """,
    )
    err = error_of(path)
    assert err.line == 5
    message = str(err)
    assert "models[1].served_model_name" in message
    assert "'mlx-community/Llama-3.2-1B-Instruct-4bit'" in message  # the later entry
    assert f"already used by models[0] ('chat') as its served_model_name at {path}:3" in message


def test_alias_colliding_with_another_models_name(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: {HF_ID}
            served_model_name: qwen
          - model_path: mlx-community/Llama-3.2-1B-Instruct-4bit
            served_model_name: llama
            aliases:
              - small
              - qwen
        """,
    )
    err = error_of(path)
    assert err.line == 8
    assert err.key == "models[1].aliases[1]"
    assert "'qwen' is already used by models[0] ('qwen') as its served_model_name" in str(err)


def test_served_name_colliding_with_another_models_alias(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: {HF_ID}
            aliases: [chat]
          - model_path: mlx-community/Llama-3.2-1B-Instruct-4bit
            served_model_name: chat
        """,
    )
    err = error_of(path)
    assert err.line == 5
    assert f"as its aliases[0] at {path}:3" in str(err)


def test_alias_equal_to_own_name_and_blank_names(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, "models:\n  - model_path: a/b\n    aliases: [a/b]\n"))
    assert "this same entry" in str(err)
    err = error_of(write(tmp_path, "models:\n  - model_path: a/b\n    aliases: ['my model']\n"))
    assert err.line == 3
    assert "blank or has spaces" in str(err)


def test_defaulted_served_names_clash_on_model_path(tmp_path: Path) -> None:
    path = write(tmp_path, f"models:\n  - model_path: {HF_ID}\n  - model_path: {HF_ID}\n")
    err = error_of(path)
    assert err.line == 3
    assert "models[1].model_path" in str(err)


# --------------------------------------------------------------------------- document shape


def test_empty_file(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, "# nothing yet\n"))
    assert "empty" in str(err)
    assert "models" in str(err)


def test_top_level_not_a_mapping(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, f"- model_path: {HF_ID}\n"))
    assert "top level must be a mapping" in str(err)
    assert "got a list" in str(err)


def test_missing_models(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, "server:\n  port: 8000\n"))
    assert "no 'models:' list" in str(err)


def test_empty_models(tmp_path: Path) -> None:
    path = write(tmp_path, "server:\n  port: 8000\nmodels: []\n")
    err = error_of(path)
    assert err.line == 3
    assert str(err).startswith(f"models at {path}:3: the list is empty")


def test_models_not_a_list(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, f"models:\n  model_path: {HF_ID}\n"))
    assert err.line == 2
    assert "expected a list of model entries" in str(err)


def test_entry_not_a_mapping_and_missing_model_path(tmp_path: Path) -> None:
    path = write(tmp_path, f"models:\n  - model_path: {HF_ID}\n  - just-a-name\n")
    err = error_of(path)
    assert (err.line, err.model_index) == (3, 1)
    assert str(err).startswith(f"models[1] at {path}:3: expected a mapping")
    path = write(tmp_path, "models:\n  - served_model_name: x\n    temperature: 1\n")
    err = error_of(path)
    assert err.line == 2
    assert f"models[0] at {path}:2 (model 'x'): missing required key 'model_path'" in str(err)


def test_server_not_a_mapping(tmp_path: Path) -> None:
    err = error_of(write(tmp_path, f"server: 8000\nmodels:\n  - model_path: {HF_ID}\n"))
    assert err.line == 1
    assert "expected a mapping of server settings" in str(err)


def test_yaml_syntax_error_has_a_line(tmp_path: Path) -> None:
    path = write(tmp_path, f"models:\n  - model_path: {HF_ID}\n    aliases: [a, b\n")
    err = error_of(path)
    assert err.line is not None and err.line >= 3
    assert "not valid YAML" in str(err)
    assert f"{path}:{err.line}" in str(err)


def test_unsafe_yaml_tags_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "models: !!python/object/apply:os.system ['true']\n")
    err = error_of(path)
    assert "not valid YAML" in str(err)
    assert err.line == 1


def test_missing_file(tmp_path: Path) -> None:
    err = error_of(tmp_path / "nope.yaml")
    assert "not found" in str(err)


def test_null_values_keep_defaults(tmp_path: Path) -> None:
    config = load(tmp_path, f"server:\nmodels:\n  - model_path: {HF_ID}\n    temperature:\n")
    assert config.server == ServerConfig()
    assert config.models[0].temperature is None


# --------------------------------------------------------------------------- mlx-openai-server


def test_mlx_openai_server_file_loads_and_maps(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mlx_gateway.supervisor.config"):
        config = load_config(DATA / "mlx_openai_server.yaml")
    server = config.server
    assert (server.host, server.port, server.log_level) == ("0.0.0.0", 8000, "info")
    assert server.start_timeout == 900  # model_load_timeout
    qwen, llama, tiny = config.models
    assert qwen.model_path == "mlx-community/Qwen3-0.6B-4bit"
    assert qwen.names == ("qwen3-small", "qwen", "qwen3-small:2.1")  # + version
    assert qwen.context_length == 32768
    assert qwen.idle_timeout == 300  # on_demand_idle_timeout: 5m
    assert qwen.chat_template_file == str(DATA / "templates" / "chatml.jinja")
    assert (qwen.max_tokens, qwen.temperature, qwen.top_p) == (4096, 0.6, 0.95)
    assert (qwen.top_k, qwen.min_p, qwen.repetition_penalty) == (20, 0.0, 1.05)
    assert qwen.max_concurrency == 16  # batch_completion_size
    assert (qwen.queue_timeout, qwen.max_queue) == (600, 50)  # queue_size
    assert (qwen.prefill_batch_size, qwen.prefill_step_size) == (4, 1024)
    assert (qwen.kv_bits, qwen.kv_group_size, qwen.quantized_kv_start) == (8, 64, 1024)
    assert llama.served_model_name == "llama-1b"  # model_id
    assert llama.max_concurrency == 1  # disable_batching: true
    assert llama.draft_model_path == "mlx-community/Llama-3.2-1B-Instruct-4bit"
    assert llama.num_draft_tokens == 2
    assert tiny.model_path == str(DATA / "models" / "tiny-lm")
    assert tiny.idle_timeout == 120
    # ignored keys are listed, with their lines, as warnings — never errors
    text = caplog.text
    assert "max_loaded_models (line 11)" in text
    assert "enable_auto_tool_choice (line 24)" in text
    assert "draft_model_path" not in text  # used now: speculative decoding
    assert "kv_bits" not in text  # used now: KV cache quantization


@pytest.mark.parametrize(
    ("entry", "key", "words"),
    [
        ("model_type: whisper\n    kv_bits: 8", "kv_bits", "applies to language and vision"),
        ("model_type: vlm\n    max_kv_size: 4096", "max_kv_size", "no bounded KV cache"),
        ("kv_bits: 8\n    max_kv_size: 4096", "kv_bits", "keep one of them"),
        ("kv_bits: 6", "kv_bits", ""),
    ],
)
def test_kv_cache_settings_only_where_a_backend_applies_them(
    tmp_path: Path, entry: str, key: str, words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, f"models:\n  - model_path: org/m\n    {entry}\n")
    assert key in str(info.value) and words in str(info.value)


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("model_type: embeddings\n    draft_model_path: org/d", "applies to language models"),
        ("kv_bits: 8\n    draft_model_path: org/d", "draft_model_path and kv_bits together"),
        ("max_kv_size: 64\n    draft_model_path: org/d", "and max_kv_size together"),
        ("draft_model_path: ./nowhere", "local draft model directory"),
        ("draft_model_path: org/d\n    num_draft_tokens: 0", "num_draft_tokens"),
    ],
)
def test_a_draft_model_only_where_it_can_work(tmp_path: Path, entry: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, f"models:\n  - model_path: org/m\n    {entry}\n")
    message = str(info.value)
    assert words in message and info.value.line in (3, 4), message


def test_a_draft_model_reaches_the_worker(tmp_path: Path) -> None:
    (tmp_path / "draft").mkdir()
    config = load(tmp_path, "models:\n  - model_path: org/m\n    draft_model_path: draft\n")
    model = config.models[0]
    assert model.draft_model_path == str(tmp_path / "draft")  # from the file's folder
    options = lm_worker_options(model)
    assert options["draft_model_path"] == str(tmp_path / "draft")
    assert options["num_draft_tokens"] == 3
    assert "draft_model_path" not in lm_worker_options(
        load(tmp_path, "models:\n  - model_path: org/m\n").models[0]
    )


def adapter_folder(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "adapter_config.json").write_text("{}")
    (folder / "adapters.safetensors").write_bytes(b"")
    return folder


def test_adapters_resolve_from_the_config_folder(tmp_path: Path) -> None:
    adapter_folder(tmp_path, "sql")
    adapter_folder(tmp_path, "style")
    config = load(
        tmp_path,
        "models:\n  - model_path: org/m\n    adapters:\n      sql: sql\n"
        "    adapter_path: ./style\n",
    )
    model = config.models[0]
    assert model.adapters == {"sql": str(tmp_path / "sql")}
    assert model.adapter_path == str(tmp_path / "style")


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("model_type: embeddings\n    adapters: {sql: sql}", "served for language models"),
        ("adapters: {a+b: sql}", "'+' stacks adapters"),
        ("adapters: {none: sql}", "'none' asks for the base model"),
        ("adapters: {sql: ./missing}", "has no adapter_config.json"),
        ("adapter_path: sql\n    adapters: {default: sql}", "mounts its adapter as 'default'"),
    ],
)
def test_adapters_are_checked(tmp_path: Path, entry: str, words: str) -> None:
    adapter_folder(tmp_path, "sql")
    with pytest.raises(ConfigError) as info:
        load(tmp_path, f"models:\n  - model_path: org/m\n    {entry}\n")
    assert words in str(info.value) and info.value.line in (3, 4), str(info.value)


def test_mlx_openai_server_hub_layout_loads(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="mlx_gateway.supervisor.config"):
        config = load_config(DATA / "mlx_openai_server_hub.yaml")
    assert (config.server.host, config.server.port, config.server.log_level) == (
        "127.0.0.1",
        8123,
        "debug",
    )
    qwen, gemma = config.models
    assert (qwen.served_model_name, qwen.on_demand, qwen.idle_timeout) == ("qwen-small", True, 600)
    assert qwen.max_concurrency == 2
    assert (gemma.served_model_name, gemma.on_demand) == ("gemma", False)
    assert qwen.group == gemma.group == "small"  # kept: one of them resident at a time
    assert qwen.queue_timeout == 300
    assert "groups" in caplog.text
    assert "model_starting_port" in caplog.text


def test_mlx_openai_server_example_with_an_image_model(tmp_path: Path) -> None:
    # The example of mlx-openai-server's configuration docs: an lm and an image model.
    config = load(
        tmp_path,
        """
        server:
          host: "0.0.0.0"
          port: 8000
          log_level: INFO

        models:
          - model_path: mlx-community/MiniMax-M2.5-4bit
            model_type: lm
            served_model_name: Minimax-M2.5
            queue_timeout: 600
            enable_auto_tool_choice: true
            tool_call_parser: minimax_m2
            reasoning_parser: minimax_m2

          - model_path: black-forest-labs/FLUX.2-klein-4B
            model_type: image-generation
            config_name: flux2-klein-4b
            quantize: 4
            served_model_name: flux2-klein-4b
            on_demand: true
            on_demand_idle_timeout: 120
        """,
    )
    _, flux = config.models
    assert (flux.worker_kind, flux.config_name, flux.quantize) == ("image", "flux2-klein-4b", 4)
    assert (flux.on_demand, flux.idle_timeout) == (True, 120)


def test_compat_key_errors_point_at_the_written_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
        models:
          - model_path: {HF_ID}
            default_temperature: -1
        """,
    )
    err = error_of(path)
    assert err.key == "models[0].default_temperature"
    assert f"models[0].default_temperature at {path}:3" in str(err)
    path = write(tmp_path, f"models:\n  - model_path: {HF_ID}\n    on_demand_idle_timeout: x\n")
    err = error_of(path)
    assert f"models[0].on_demand_idle_timeout at {path}:3" in str(err)


def test_top_level_and_section_server_keys_conflict(tmp_path: Path) -> None:
    path = write(tmp_path, f"port: 1234\nserver:\n  port: 8000\nmodels:\n  - model_path: {HF_ID}\n")
    err = error_of(path)
    assert err.line == 3
    assert str(err).startswith(f"server.port at {path}:3: port (line 1) already sets port")


# --------------------------------------------------------------------------- from model path


def test_config_from_model_path_defaults() -> None:
    config = config_from_model_path(HF_ID)
    assert config.server == ServerConfig()
    (model,) = config.models
    assert (model.model_path, model.served_model_name, model.model_type) == (HF_ID, HF_ID, "lm")


def test_config_from_model_path_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "weights").mkdir()
    monkeypatch.chdir(tmp_path)
    config = config_from_model_path(
        "./weights",
        served_model_name="mine",
        host="0.0.0.0",
        port=9001,
        log_level=None,  # left out on the command line: keeps the default
        model_options={"context_length": 2048, "trust_remote_code": True},
    )
    assert (config.server.host, config.server.port, config.server.log_level) == (
        "0.0.0.0",
        9001,
        "info",
    )
    (model,) = config.models
    assert model.model_path == str(tmp_path / "weights")
    assert model.names == ("mine",)
    assert (model.context_length, model.trust_remote_code) == (2048, True)


def test_config_from_model_path_validates() -> None:
    with pytest.raises(ConfigError, match=r"^server\.port: expected an integer <= 65535"):
        config_from_model_path(HF_ID, port=70000)
    with pytest.raises(ConfigError, match=r"^unknown key 'prot' in server; did you mean 'port'"):
        config_from_model_path(HF_ID, prot=80)
    image = config_from_model_path("org/some-image-model", model_type="image")
    assert image.models[0].worker_kind == "image"
    with pytest.raises(ConfigError, match=r"^models\[0\]\.model_path \(model '\./nope'\)"):
        config_from_model_path("./nope")


def test_override_server_validates_like_the_file(tmp_path: Path) -> None:
    config = load(tmp_path, f"server:\n  port: 8000\nmodels:\n  - model_path: {HF_ID}\n")
    changed = override_server(
        config, host="0.0.0.0", port=9100, log_level="DEBUG", shutdown_grace=None
    )
    assert (changed.server.host, changed.server.port, changed.server.log_level) == (
        "0.0.0.0",
        9100,
        "debug",
    )
    assert changed.server.shutdown_grace == config.server.shutdown_grace
    assert changed.models is config.models
    assert config.server.port == 8000  # the original is left alone
    with pytest.raises(ConfigError, match=r"^server\.port: expected an integer <= 65535"):
        override_server(config, port=99999)
    with pytest.raises(ConfigError, match=r"^server\.log_level: 'loud' is not allowed"):
        override_server(config, log_level="loud")
    with pytest.raises(ConfigError, match="did you mean 'host'"):
        override_server(config, hots="x")


# --------------------------------------------------------------------------- isolation


def test_gateway_config_never_imports_mlx() -> None:
    code = (
        "import sys, mlx_gateway.supervisor.config as c; "
        "c.config_from_model_path('a/b'); "
        "bad = [m for m in sys.modules if m.split('.')[0] in "
        "('mlx', 'mlx_lm', 'mlx_vlm', 'mlx_whisper', 'mlx_embeddings', 'mflux', 'torch')]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_two_kept_models_in_one_group_are_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="mlx_gateway.supervisor.config"):
        config = load(
            tmp_path,
            """
            models:
              - {model_path: org/a, served_model_name: a, group: g, on_demand: false}
              - {model_path: org/b, served_model_name: b, group: g, on_demand: false}
              - {model_path: org/c, served_model_name: c, group: g}
            """,
        )
    assert [m.group for m in config.models] == ["g", "g", "g"]
    assert "group 'g': 'a', 'b' are all on_demand: false" in caplog.text
