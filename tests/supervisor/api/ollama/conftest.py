"""A whole gateway process for the Ollama tests that need real workers: a tiny
random llama (``tiny``), a tiny BERT (``minilm``) and a tiny Qwen2-VL (``eyes``);
a local stand-in for the hub serving the llama's files as
``mlx-community/tiny-llama`` (``HF_ENDPOINT``); the gateway's own Hugging Face
cache and state folder (``pulled.json``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ollama
import pytest

from tests.e2e.gateway import Gateway
from tests.fixtures.hub_server import HubServer

PULLABLE = "mlx-community/tiny-llama"


@dataclass
class Lab:
    """What a test needs to start (and restart) the gateway."""

    tmp: Path
    models: list[dict[str, Any]]
    env: dict[str, str]
    hub: HubServer

    def start(self, **server: Any) -> Gateway:
        return Gateway(self.tmp, self.models, env=self.env, **server)

    @property
    def cache(self) -> Path:
        return Path(self.env["HF_HUB_CACHE"])

    @property
    def state(self) -> Path:
        return Path(self.env["MLX_GATEWAY_CACHE_DIR"])


@pytest.fixture(scope="module")
def hub(tiny_lm_path: Path) -> Iterator[HubServer]:
    with HubServer({PULLABLE: tiny_lm_path}) as server:
        yield server


@pytest.fixture(scope="module")
def lab(
    hub: HubServer,
    tiny_lm_path: Path,
    tiny_bert_path: Path,
    tiny_vlm_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Lab:
    tmp = tmp_path_factory.mktemp("ollama-lab")
    models = [
        {"served_model_name": "tiny", "model_path": str(tiny_lm_path), "max_tokens": 16},
        {
            "served_model_name": "minilm",
            "model_path": str(tiny_bert_path),
            "model_type": "embeddings",
        },
        {"served_model_name": "eyes", "model_path": str(tiny_vlm_path), "model_type": "vlm"},
    ]
    env = {
        "HF_HUB_OFFLINE": "0",
        "HF_ENDPOINT": hub.url,
        "HF_HUB_CACHE": str(tmp / "hf-cache"),
        "MLX_GATEWAY_CACHE_DIR": str(tmp / "state"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    return Lab(tmp, models, env, hub)


@pytest.fixture(scope="module")
def gateway(lab: Lab) -> Iterator[Gateway]:
    gw = lab.start()
    yield gw
    gw.stop()


Connect = Callable[..., ollama.Client]


@pytest.fixture
def connect() -> Iterator[Connect]:
    """``connect(url, **options)``: an official Python client, closed after the test."""
    made: list[ollama.Client] = []

    def make(url: str, **options: object) -> ollama.Client:
        made.append(ollama.Client(host=url, timeout=120, **options))
        return made[-1]

    yield make
    for client in made:
        client.close()
