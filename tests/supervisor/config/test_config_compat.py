"""Configuration: mlx-openai-server's keys and layouts, per-kind checks (KV cache,
draft model, adapters), configs built from a model path, and what loading a config
imports."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from mlx_gateway.supervisor.config import (
    ConfigError,
    ServerConfig,
    config_from_model_path,
    load_config,
    override_server,
)

from .test_config import DATA, HF_ID, error_of, load, write

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
        (
            "model_type: vlm\n    max_kv_size: 4096",
            "max_kv_size",
            "language models (model_type lm)",
        ),
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
    options = model.worker_options()
    assert options["draft_model_path"] == str(tmp_path / "draft")
    assert options["num_draft_tokens"] == 3
    assert "draft_model_path" not in (
        load(tmp_path, "models:\n  - model_path: org/m\n").models[0].worker_options()
    )


def test_a_batch_slice_linger_reaches_the_lm_worker(tmp_path: Path) -> None:
    entry = "models:\n  - model_path: org/m\n"
    assert load(tmp_path, entry).models[0].worker_options()["batch_slice_linger"] == 0.0
    config = load(tmp_path, entry + "    batch_slice_linger: 2.5\n")
    assert config.models[0].worker_options()["batch_slice_linger"] == 2.5
    with pytest.raises(ConfigError, match=r"batch_slice_linger at .*config.yaml:3 .*>= 0"):
        load(tmp_path, entry + "    batch_slice_linger: -1\n")


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
        ("model_type: embeddings\n    adapters: {sql: sql}", "applies to language models"),
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
