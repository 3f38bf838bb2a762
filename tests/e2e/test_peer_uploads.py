"""Peer forwarding of the routes the fake worker cannot serve: a real gateway
process with a tiny Whisper and a tiny BERT, peered by a gateway that has neither,
driven by the official openai SDK (an audio upload is a multipart form; its model
is a form field)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from mlx_gateway.supervisor.config.schema import PeerConfig
from tests.fixtures.whisper import FOX_CLIPS
from tests.supervisor.live import LiveGateway

from .gateway import Gateway

pytestmark = pytest.mark.slow

OGG, _ = FOX_CLIPS


@pytest.fixture(scope="module")
def peer(
    tiny_whisper_path: Path, tiny_bert_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    gw = Gateway(
        tmp_path_factory.mktemp("peer"),
        [
            {
                "served_model_name": "ears",
                "model_path": str(tiny_whisper_path),
                "model_type": "whisper",
            },
            {
                "served_model_name": "vectors",
                "model_path": str(tiny_bert_path),
                "model_type": "embeddings",
            },
        ],
        api_keys=["sk-peer"],
    )
    yield gw
    gw.stop()


def sdk(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


def test_uploads_and_embeddings_reach_the_peer(peer: Gateway) -> None:
    peers = [PeerConfig(url=peer.base_url, name="studio", api_key="sk-peer")]
    with LiveGateway({"model_path": "fake/ok"}, peers=peers) as front:
        client, direct = sdk(front.url, "none"), sdk(peer.base_url, "sk-peer")

        # Greedy (a form field the peer must get): the random tiny model's sampled
        # text can be empty, its greedy one is the same through the front and direct.
        with OGG.open("rb") as audio:
            raw = client.audio.transcriptions.with_raw_response.create(
                model="ears", file=audio, temperature=0
            )
        assert raw.headers["x-mlx-gateway-peer"] == "studio"
        result = raw.parse()
        assert result.usage is not None and result.usage.seconds == 3  # type: ignore[union-attr]
        with OGG.open("rb") as audio:
            there = direct.audio.transcriptions.create(model="ears", file=audio, temperature=0)
        assert result.text and result.text == there.text

        texts = ["a peer gateway", "forwards embeddings"]
        through = client.embeddings.create(model="vectors", input=texts)
        straight = direct.embeddings.create(model="vectors", input=texts)
        assert [e.embedding for e in through.data] == [e.embedding for e in straight.data]
