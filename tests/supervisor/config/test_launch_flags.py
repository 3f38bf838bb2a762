"""``mlx-gateway launch --model-path X`` with each flag of mlx-openai-server's
``launch`` (and of mlx_lm.server / mlx-vlm's server where they mean the same):
the config each one gives, and the docs table kept equal to the flag table."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from mlx_gateway.supervisor.cli import build_parser, configure_logging, main, resolve_config
from mlx_gateway.supervisor.config import ConfigError, GatewayConfig, load_config
from mlx_gateway.supervisor.config.launch_flags import LAUNCH_FLAGS, markdown_table

ROOT = Path(__file__).resolve().parents[3]

# flag → (the words after it, the setting it changes, the value expected there).
# ``None`` as the setting: accepted and not used (a warning names it).
CASES: dict[str, tuple[list[str], str | None, Any]] = {
    "--model-type": (["embeddings"], "model.model_type", "embeddings"),
    "--served-model-name": (["short"], "model.served_model_name", "short"),
    "--context-length": (["4096"], "model.context_length", 4096),
    "--max-tokens": (["77"], "model.max_tokens", 77),
    "--temperature": (["0.3"], "model.temperature", 0.3),
    "--top-p": (["0.9"], "model.top_p", 0.9),
    "--top-k": (["40"], "model.top_k", 40),
    "--min-p": (["0.05"], "model.min_p", 0.05),
    "--repetition-penalty": (["1.1"], "model.repetition_penalty", 1.1),
    "--max-concurrency": (["3"], "model.max_concurrency", 3),
    "--decode-concurrency": (["5"], "model.max_concurrency", 5),
    "--prompt-concurrency": (["2"], "model.prefill_batch_size", 2),
    "--prefill-step-size": (["512"], "model.prefill_step_size", 512),
    "--queue-timeout": (["45"], "model.queue_timeout", 45.0),
    "--queue-size": (["9"], "model.max_queue", 9),
    "--prompt-cache-size": (["4"], "model.prompt_cache_entries", 4),
    "--max-bytes": (["2GB"], "model.prompt_cache_bytes", "2GB"),
    "--kv-bits": (["8"], "model.kv_bits", 8),
    "--kv-group-size": (["32"], "model.kv_group_size", 32),
    "--quantized-kv-start": (["100"], "model.quantized_kv_start", 100),
    "--max-kv-size": (["1024"], "model.max_kv_size", 1024),
    "--tool-call-parser": (["qwen3"], "model.tool_call_parser", "qwen3"),
    "--reasoning-parser": (["qwen3"], "model.reasoning_parser", "qwen3"),
    "--enable-auto-tool-choice": ([], None, None),
    "--chat-template-file": (["tpl.jinja"], "model.chat_template_file", "tpl.jinja"),
    "--trust-remote-code": ([], "model.trust_remote_code", True),
    "--jit": ([], "model.on_demand", True),
    "--auto-unload-minutes": (["2"], "model.idle_timeout", 120.0),
    "--disable-batching": ([], "model.max_concurrency", 1),
    "--disable-auto-resize": ([], None, None),
    "--config-name": (["flux-dev"], "model.config_name", "flux-dev"),
    "--quantize": (["4"], "model.quantize", 4),
    "--lora-paths": (["a.safetensors,b.safetensors"], "model.lora_paths", None),
    "--lora-scales": (["0.5"], "model.lora_scales", [0.5]),
    "--draft-model-path": (["org/draft"], "model.draft_model_path", "org/draft"),
    "--num-draft-tokens": (["5"], "model.num_draft_tokens", 5),
    "--adapter-path": (["adapters/"], "model.adapter_path", None),
    "--model-load-timeout": (["30"], "server.start_timeout", 30.0),
    "--log-file": (["logs/gw.log"], "server.log_file", None),
    "--no-log-file": ([], "server.no_log_file", True),
    "--log-rotation": (["1MB"], "server.log_rotation", "1MB"),
    "--log-retention": (["2"], "server.log_retention", 2),
}
# Flags that only make sense beside another one.
COMPANIONS = {
    "--model-type": [],
    "--config-name": ["--model-type", "image"],
    "--quantize": ["--model-type", "image"],
    "--lora-paths": ["--model-type", "image"],
    "--lora-scales": ["--model-type", "image", "--lora-paths", "one.safetensors"],
}


def launch(*words: str) -> GatewayConfig:
    return resolve_config(build_parser().parse_args(["launch", *words]))


def setting(config: GatewayConfig, path: str) -> Any:
    section, key = path.split(".")
    return getattr(config.models[0] if section == "model" else config.server, key)


def test_every_flag_of_the_table_is_tested() -> None:
    assert sorted(CASES) == sorted(flag.names[0] for flag in LAUNCH_FLAGS)


@pytest.mark.parametrize("flag", sorted(CASES))
def test_each_flag_sets_its_key(
    flag: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tpl.jinja").write_text("{{ messages }}")
    (tmp_path / "a.safetensors").write_bytes(b"")
    (tmp_path / "b.safetensors").write_bytes(b"")
    (tmp_path / "one.safetensors").write_bytes(b"")
    (tmp_path / "adapters").mkdir()
    (tmp_path / "adapters" / "adapter_config.json").write_text("{}")
    (tmp_path / "adapters" / "adapters.safetensors").write_bytes(b"")
    words, path, expected = CASES[flag]
    base = launch("--model-path", "org/model", *COMPANIONS.get(flag, []))
    with caplog.at_level(logging.WARNING):
        config = launch("--model-path", "org/model", *COMPANIONS.get(flag, []), flag, *words)
    if path is None:
        # Accepted, not used: the same config, and a warning naming the key.
        assert config == base
        key = next(f.key for f in LAUNCH_FLAGS if f.names[0] == flag)
        assert key in caplog.text
        return
    got = setting(config, path)
    if flag == "--chat-template-file":
        expected = str(tmp_path / "tpl.jinja")
    elif flag == "--lora-paths":
        expected = [str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")]
    elif flag == "--adapter-path":
        expected = str(tmp_path / "adapters")
    elif flag == "--log-file":
        expected = str(tmp_path / "logs" / "gw.log")
    assert got == expected
    assert got != setting(base, path) or flag in ("--jit", "--model-type")


@pytest.mark.parametrize(
    ("words", "path", "expected"),
    [
        (["--model", "org/model"], "model.model_path", "org/model"),  # mlx_lm / mlx-vlm
        (["--model-path", "org/model", "--temp", "0.2"], "model.temperature", 0.2),  # mlx_lm
        (["--model-path", "org/model", "--draft-model", "d"], "model.model_path", "org/model"),
        (
            ["--model-path", "org/model", "--prompt-cache-bytes", "64MB"],
            "model.prompt_cache_bytes",
            "64MB",
        ),
    ],
)
def test_the_other_servers_spellings(words: list[str], path: str, expected: Any) -> None:
    assert setting(launch(*words), path) == expected


def test_a_bad_value_names_the_setting() -> None:
    with pytest.raises(ConfigError, match="kv_bits"):
        launch("--model-path", "org/model", "--kv-bits", "3")
    with pytest.raises(ConfigError, match="log_rotation"):
        launch("--model-path", "org/model", "--log-rotation", "lots")


def test_model_flags_with_config_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    config = ROOT / "config.example.yaml"
    assert main(["launch", "--config", str(config), "--max-tokens", "5"]) == 2
    assert "--model-path" in capsys.readouterr().err


def test_unknown_flag_still_fails(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["launch", "--model-path", "m", "--no-such-flag"])
    assert "--no-such-flag" in capsys.readouterr().err


def test_docs_show_the_flag_table() -> None:
    docs = (ROOT / "docs" / "configuration.md").read_text()
    assert markdown_table() in docs


@pytest.fixture
def restore_logging() -> Any:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers:
        if handler not in handlers:
            handler.close()
    root.handlers[:] = handlers
    root.setLevel(level)


def test_log_file_is_written_and_rotated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_logging: None
) -> None:
    monkeypatch.chdir(tmp_path)
    config = launch(
        "--model-path", "org/model", "--log-file", "logs/gw.log",
        "--log-rotation", "2KB", "--log-retention", "2", "--log-format", "json",
    )  # fmt: skip
    configure_logging(config)
    log = logging.getLogger("mlx_gateway.test")
    for i in range(200):
        log.warning("[%s] line %d of the log file test", "org/model", i)
    files = sorted(p.name for p in (tmp_path / "logs").iterdir())
    assert files == ["gw.log", "gw.log.1", "gw.log.2"]  # two rotated kept, older deleted
    assert all((tmp_path / "logs" / f).stat().st_size <= 2048 for f in files)
    last = (tmp_path / "logs" / "gw.log").read_text().splitlines()[-1]
    assert json.loads(last)["message"] == "line 199 of the log file test"
    assert json.loads(last)["model"] == "org/model"


def test_log_path_and_no_log_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_logging: None
) -> None:
    monkeypatch.chdir(tmp_path)
    file = tmp_path / "config.yaml"
    file.write_text("server:\n  log_path: out\nmodels:\n  - model_path: org/model\n")
    configure_logging(load_config(file))
    logging.getLogger("mlx_gateway.test").warning("to app.log")
    assert "to app.log" in (tmp_path / "out" / "app.log").read_text()
    configure_logging(launch("--model-path", "m", "--log-file", "x.log", "--no-log-file"))
    logging.getLogger("mlx_gateway.test").warning("nowhere")
    assert not (tmp_path / "x.log").exists()
