"""Configuration errors about the document as a whole: unknown model types, clashing
names and aliases, a file that is not the expected shape."""

from __future__ import annotations

from pathlib import Path

from mlx_gateway.supervisor.config import (
    MODEL_TYPES,
    ServerConfig,
)

from .test_config import HF_ID, error_of, load, write

# --------------------------------------------------------------------------- model types


def test_unknown_model_type_lists_the_allowed_ones(tmp_path: Path) -> None:
    path = write(tmp_path, f"models:\n  - model_path: {HF_ID}\n    model_type: lmm\n")
    err = error_of(path)
    assert err.line == 3
    assert "unknown model_type 'lmm'" in str(err)
    for kind in MODEL_TYPES:
        assert kind in str(err)


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
