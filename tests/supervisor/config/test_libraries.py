"""``serve_ollama_library`` and ``serve_lmstudio_library`` in the config: a fake
Ollama store and a fake LM Studio folder in a temporary HOME are listed with their
source, by the names the two apps show, and nothing is added when the switches
are off or a model is served by the file already."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlx_gateway.supervisor.config import ConfigError, load_config
from mlx_gateway.supervisor.config.libraries import lmstudio_models_dir
from tests.fixtures.libraries import lmstudio_gguf, lmstudio_mlx_folder, ollama_store_model

GGUF = b"GGUF" + bytes(60)  # listing reads no GGUF; serving it is the e2e test's
MLX = {"model_type": "qwen3", "quantization": {"bits": 4, "group_size": 64}}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    monkeypatch.setenv("MLX_GATEWAY_CACHE_DIR", str(tmp_path / "state"))
    return home


def _mlx_folder(tmp_path: Path, config: dict[str, object]) -> Path:
    folder = tmp_path / f"src-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"")
    return folder


def _config(tmp_path: Path, switches: str, models: str = "  - model_path: mine/x\n") -> Path:
    file = tmp_path / "config.yaml"
    file.write_text(f"server:\n{switches}models:\n{models}")
    return file


def test_both_libraries_are_listed_with_their_source(tmp_path: Path, home: Path) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(GGUF)
    store = home / ".ollama" / "models"
    ollama_store_model(store, "llama3.2", gguf)
    ollama_store_model(store, "qwen3", gguf, tag="4b")
    ollama_store_model(store, "someone/tuned", gguf)
    (store / "manifests" / "registry.ollama.ai" / "library" / "broken").mkdir(parents=True)
    (store / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest").write_text("{")
    models = home / ".lmstudio" / "models"
    lmstudio_mlx_folder(models, "mlx-community/Qwen3-0.6B-4bit", _mlx_folder(tmp_path, MLX))
    vision = {**MLX, "vision_config": {}}
    lmstudio_mlx_folder(models, "mlx-community/vl", _mlx_folder(tmp_path, vision))
    lmstudio_mlx_folder(
        models, "mlx-community/whisper", _mlx_folder(tmp_path, {"model_type": "whisper"})
    )
    lmstudio_gguf(models, "lmstudio-community/one-GGUF", gguf, "one-Q4_K_M.gguf")
    lmstudio_gguf(models, "lmstudio-community/one-GGUF", gguf, "mmproj-one-F16.gguf")
    lmstudio_gguf(models, "bartowski/two-GGUF", gguf, "two-Q4_K_M.gguf")
    lmstudio_gguf(models, "bartowski/two-GGUF", gguf, "two-Q8_0.gguf")

    file = _config(
        tmp_path,
        "  serve_ollama_library: true\n  serve_lmstudio_library: true\n",
        "  - model_path: ollama:qwen3:4b\n    served_model_name: mine\n",
    )
    config = load_config(file)
    found = {m.served_model_name: (m.model_type, m.source, m.model_path) for m in config.models}
    lms = str(models)
    assert found == {
        "mine": ("lm", "config", "ollama:qwen3:4b"),  # the file's own: not added twice
        "llama3.2": ("lm", "ollama", "ollama:llama3.2:latest"),
        "someone/tuned": ("lm", "ollama", "ollama:someone/tuned:latest"),
        "mlx-community/Qwen3-0.6B-4bit": ("lm", "lmstudio", f"{lms}/mlx-community/Qwen3-0.6B-4bit"),
        "mlx-community/vl": ("vlm", "lmstudio", f"{lms}/mlx-community/vl"),
        "lmstudio-community/one-GGUF": (
            "lm",
            "lmstudio",
            f"{lms}/lmstudio-community/one-GGUF/one-Q4_K_M.gguf",
        ),
        "bartowski/two-GGUF/two-Q4_K_M": (
            "lm",
            "lmstudio",
            f"{lms}/bartowski/two-GGUF/two-Q4_K_M.gguf",
        ),
        "bartowski/two-GGUF/two-Q8_0": (
            "lm",
            "lmstudio",
            f"{lms}/bartowski/two-GGUF/two-Q8_0.gguf",
        ),
    }
    # Off by default: the same file without the switches serves only its own model.
    file.write_text(file.read_text().replace("true", "false"))
    assert [m.served_model_name for m in load_config(file).models] == ["mine"]


def test_the_apps_configured_folders_are_read(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(GGUF)
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama-elsewhere"))
    ollama_store_model(tmp_path / "ollama-elsewhere", "tiny", gguf)
    ollama_store_model(home / ".ollama" / "models", "not-this-one", gguf)
    (home / ".lmstudio").mkdir()
    downloads = tmp_path / "lms-downloads"
    (home / ".lmstudio" / "settings.json").write_text(
        json.dumps({"downloadsFolder": str(downloads)})
    )
    assert lmstudio_models_dir() == downloads
    lmstudio_gguf(downloads, "pub/model", gguf, "model.gguf")
    file = _config(tmp_path, "  serve_ollama_library: true\n  serve_lmstudio_library: true\n")
    names = [(m.served_model_name, m.source) for m in load_config(file).models]
    assert names == [("mine/x", "config"), ("tiny", "ollama"), ("pub/model", "lmstudio")]
    # LM Studio's home moved: ~/.lmstudio-home-pointer names it.
    moved = tmp_path / "lms-home"
    (moved / "models").mkdir(parents=True)
    (home / ".lmstudio-home-pointer").write_text(f"{moved}\n")
    assert lmstudio_models_dir() == moved / "models"


def test_source_is_not_a_key_of_the_file(tmp_path: Path, home: Path) -> None:
    file = _config(tmp_path, "", "  - model_path: mine/x\n    source: ollama\n")
    with pytest.raises(ConfigError, match="unknown key 'source'"):
        load_config(file)
