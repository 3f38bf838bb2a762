"""Peer gateways: two (or three) real gateways on local ports, one peering the
others (``server.peers``), with fake workers behind each over real ZeroMQ.

Clients are the OpenAI and Anthropic SDKs and httpx. Replicas, failover and keys
are in test_peer_replicas.py; the gateways in gateways.py.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from mlx_gateway.supervisor.config import ConfigError, load_config
from mlx_gateway.supervisor.config.schema import PeerConfig
from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.peers.target import model_of

from ..live import LiveGateway
from .gateways import alpha, chat, free_port, pair, sdk, wait_until

# --------------------------------------------------------------------------- routing


def test_peer_models_are_listed_and_every_api_is_forwarded() -> None:
    with LiveGateway(alpha(aliases=["a1"])) as b:
        peers = [PeerConfig(url=f"{b.url}/v1", name="mac-b")]
        with LiveGateway({"model_path": "fake/ok", "served_model_name": "mine"}, peers=peers) as a:
            listed = {m["id"]: m for m in httpx.get(f"{a.url}/v1/models").json()["data"]}
            assert set(listed) == {"mine", "alpha"}
            assert listed["alpha"]["peer"] == "mac-b" and listed["alpha"]["peers"] == ["mac-b"]
            assert "peer" not in listed["mine"]
            one = httpx.get(f"{a.url}/v1/models/a1").json()  # an alias of the peer's model
            assert one["id"] == "alpha" and one["peer"] == "mac-b"

            client = sdk(a)
            raw = client.chat.completions.with_raw_response.create(
                model="alpha", messages=[{"role": "user", "content": "hello from a"}]
            )
            assert raw.headers["x-mlx-gateway-peer"] == "mac-b"
            assert raw.parse().choices[0].message.content == "hello from a "
            # the alias routes too, and the legacy completions API
            text = client.completions.create(model="a1", prompt="one two three").choices[0].text
            assert text == "one two three "
            answer = client.responses.create(model="alpha", input="via responses")
            assert answer.output_text == "via responses "
            # stored at the peer, found through this gateway
            again = httpx.get(f"{a.url}/v1/responses/{answer.id}", timeout=10)
            assert again.status_code == 200 and again.json()["id"] == answer.id
            assert httpx.get(f"{a.url}/v1/responses/resp_nowhere").status_code == 404

            claude = anthropic.Anthropic(base_url=a.url, api_key="none", max_retries=0)
            message = claude.messages.create(
                model="alpha", max_tokens=50, messages=[{"role": "user", "content": "hi claude"}]
            )
            assert message.content[0].text == "hi claude "  # type: ignore[union-attr]

            # tokenizing and counting are the peer's worker's too
            tokenized = httpx.post(f"{a.url}/tokenize", json={"model": "alpha", "content": "x y"})
            assert tokenized.headers["x-mlx-gateway-peer"] == "mac-b"
            assert tokenized.json()["tokens"] == [0, 1]  # the fake worker: one id per word
            counted = httpx.post(
                f"{a.url}/v1/chat/completions/input_tokens",
                json={
                    "model": "alpha",
                    "messages": [{"role": "user", "content": "three words here"}],
                },
            )
            assert counted.headers["x-mlx-gateway-peer"] == "mac-b"
            assert counted.json()["input_tokens"] == 3

            # the local model stays local; the peer's worker served the others
            mine = client.chat.completions.with_raw_response.create(
                model="mine", messages=[{"role": "user", "content": "at home"}]
            )
            assert "x-mlx-gateway-peer" not in mine.headers
            assert b.registry.resolve("alpha").status().state == "ready"
            assert a.registry.resolve("mine").status().state == "ready"

            # an unknown model is this gateway's own 404
            missing = chat(a, "nowhere", "x")
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "model_not_found"
            health = httpx.get(f"{a.url}/health").json()
            assert health["peers"][0]["state"] == "up" and health["peers"][0]["models"] == ["alpha"]


def test_two_gateways_peering_each_other_do_not_loop() -> None:
    """B lists and forwards to A, A to B: each lists the other's model once, and a
    request for a model neither serves is a plain 404 (no ping-pong)."""
    port_b = free_port()
    peers_a = [PeerConfig(url=f"http://127.0.0.1:{port_b}", name="b")]
    with LiveGateway({"model_path": "fake/ok", "served_model_name": "on-a"}, peers=peers_a) as a:
        # B binds the port A was told about (LiveGateway binds port 0: serve B by hand)
        peers_b = [PeerConfig(url=a.url, name="a")]
        with LiveGateway(
            {"model_path": "fake/ok", "served_model_name": "on-b"}, peers=peers_b
        ) as b:
            gateway_of(a.app).peers.peers[0].config.url = b.url
            a.run(gateway_of(a.app).peers.check_all())
            for gw, other in ((a, "on-b"), (b, "on-a")):
                ids = [m["id"] for m in httpx.get(f"{gw.url}/v1/models").json()["data"]]
                assert sorted(ids) == sorted({"on-a", "on-b"}) and ids.count(other) == 1
            assert chat(a, "on-b", "cross").json()["choices"][0]["message"]["content"] == "cross "
            assert chat(b, "on-a", "back").json()["choices"][0]["message"]["content"] == "back "
            assert chat(a, "neither", "x").status_code == 404


# --------------------------------------------------------------------------- streaming


class _FixedStream(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible server that is not mlx-gateway: a model list, and one
    fixed SSE stream written in odd pieces (a comment, a split event, a split
    UTF-8 character), so a relay that re-encodes or re-chunks by events shows."""

    PIECES = [
        b": keep-alive comment\n\n",
        b'data: {"id":"x","object":"chat.completion.chunk",'
        b'"choices":[{"index":0,"delta":{"content":"caf',
        b"\xc3",
        b'\xa9"}}]}\n\n',
        b"data: [DONE]\n\n",
    ]
    protocol_version = "HTTP/1.1"
    seen_auth: list[str | None] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"object": "list", "data": [{"id": "other-model", "object": "model"}]})
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        type(self).seen_auth.append(self.headers.get("authorization"))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for piece in self.PIECES:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
            time.sleep(0.02)
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def fixed_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FixedStream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_stream_is_relayed_byte_for_byte(fixed_server: str) -> None:
    peers = [PeerConfig(url=fixed_server, name="plain", api_key="upstream-key")]
    with LiveGateway({"model_path": "fake/ok"}, peers=peers, api_keys=["client-key"]) as a:
        body = {"model": "other-model", "stream": True, "messages": []}
        with httpx.stream(
            "POST",
            f"{a.url}/v1/chat/completions",
            json=body,
            headers={"authorization": "Bearer client-key"},
            timeout=30,
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "text/event-stream"
            assert response.headers["x-mlx-gateway-peer"] == "plain"
            relayed = b"".join(response.iter_raw())
        assert relayed == b"".join(_FixedStream.PIECES)
        # the peer got the peer's key, never the client's
        assert _FixedStream.seen_auth[-1] == "Bearer upstream-key"


def test_sdk_streams_through_the_peer_as_from_the_peer_itself() -> None:
    with pair(alpha(), {"model_path": "fake/ok"}) as (a, b):

        def streamed(gw: LiveGateway) -> list[str]:
            stream = sdk(gw).chat.completions.create(
                model="alpha",
                messages=[{"role": "user", "content": "say <b>streamed</b> text"}],
                stream=True,
                stream_options={"include_usage": True},
            )
            return [c.choices[0].delta.content or "" for c in stream if c.choices]

        # how the text is cut into chunks depends on timing (stream_interval); what
        # a stream says does not, and it arrives in pieces through the peer too
        through, direct = streamed(a), streamed(b)
        assert "".join(through) == "".join(direct) == "<b>streamed</b> text"
        assert len([piece for piece in through if piece]) > 1


def test_a_client_that_leaves_stops_the_generation_at_the_peer() -> None:
    endless = " ".join(f"w{i}" for i in range(2000))  # 40 s of answer at 20 ms a word
    with pair(alpha(), {"model_path": "fake/ok"}) as (a, b):
        handle = b.registry.resolve("alpha")
        client = httpx.Client(timeout=30)
        with client.stream(
            "POST",
            f"{a.url}/v1/chat/completions",
            json={
                "model": "alpha",
                "stream": True,
                "messages": [{"role": "user", "content": endless}],
            },
        ) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")
            wait_until(lambda: handle.inflight == 1)
            left = time.monotonic()
        client.close()  # the connection goes: the client has left
        wait_until(lambda: handle.inflight == 0, 15)
        # the peer stopped it: the whole answer would take 40 s
        assert time.monotonic() - left < 15
        assert gateway_of(a.app).peers.peers[0].inflight == 0


# --------------------------------------------------------------------------- config


def test_peers_in_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "server:\n"
        "  peers:\n"
        "    - url: http://mac-2.local:8000/v1/\n"
        "      api_key: sk-mac2\n"
        "    - {url: 'https://mac-3.local', name: studio}\n"
        "  peer_check_interval: 30s\n"
        "models:\n"
        "  - model_path: fake/ok\n"
    )
    server = load_config(path).server
    assert [(p.name, p.url, p.api_key) for p in server.peers] == [
        ("mac-2.local:8000", "http://mac-2.local:8000", "sk-mac2"),
        ("studio", "https://mac-3.local", None),
    ]
    assert server.peer_check_interval == 30.0
    path.write_text(
        "server:\n  peers:\n    - {url: 'http://a:1', name: x}\n"
        "    - {url: 'http://b:1', name: x}\n"
        "models:\n  - model_path: fake/ok\n"
    )
    with pytest.raises(ConfigError, match=r"peer name 'x' is already used by server.peers\[0\]"):
        load_config(path)
    path.write_text("server:\n  peers:\n    - url: mac-2:8000\nmodels:\n  - model_path: fake/ok\n")
    with pytest.raises(ConfigError, match="peers"):
        load_config(path)


def test_the_model_of_a_multipart_upload() -> None:
    """As the OpenAI SDK's audio uploads encode it (httpx's multipart writer)."""
    request = httpx.Request(
        "POST",
        "http://x/v1/audio/transcriptions",
        data={"language": "en"},
        files=[
            ("file", ("a.wav", b'RIFF name="model"\r\n\r\nnot-it\r\n' * 1000, "audio/wav")),
            ("model", (None, b"whisper-big")),  # after the file: its bytes are skipped
        ],
    )
    body = request.read()
    assert model_of(request.headers["content-type"], body) == "whisper-big"
    assert model_of("application/json", b'{"model": "m", "x": [1, 2]}') == "m"
    assert model_of("application/json", b"{not json") is None
    assert model_of("multipart/form-data; boundary=zz", b"--zz--\r\n") is None
