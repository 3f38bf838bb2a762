"""Peer gateways: two (or three) real gateways on local ports, one peering the
others (``server.peers``), with fake workers behind each over real ZeroMQ.

Clients are the OpenAI and Anthropic SDKs and httpx; the peer that must die is a
gateway in its own process, killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from mlx_gateway.supervisor.config import ConfigError, load_config
from mlx_gateway.supervisor.config.schema import PeerConfig
from mlx_gateway.supervisor.peers.target import model_of

from ..live import LiveGateway

PEER_PROCESS = Path(__file__).parent.parent / "processes" / "peer_process.py"
LONG = " ".join(f"w{i}" for i in range(150))  # the fake worker echoes a word per 20 ms


def alpha(**more: Any) -> dict[str, Any]:
    return {"model_path": "fake/ok", "served_model_name": "alpha", **more}


def chat(gw: LiveGateway, model: str, text: str, **body: Any) -> httpx.Response:
    return httpx.post(
        f"{gw.url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": text}], **body},
        timeout=30,
    )


def sdk(gw: LiveGateway, key: str = "none") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0, timeout=30)


@contextlib.contextmanager
def pair(
    remote: dict[str, Any], local: dict[str, Any], **server: Any
) -> Iterator[tuple[LiveGateway, LiveGateway]]:
    """Gateway ``b`` serving ``remote``, and gateway ``a`` serving ``local`` with ``b``
    as its peer (named ``b``): yields ``(a, b)``."""
    with (
        LiveGateway(remote) as b,
        LiveGateway(local, peers=[PeerConfig(url=b.url, name="b")], **server) as a,
    ):
        yield a, b


def wait_until(predicate: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PeerProcess:
    """A gateway (fake workers) in its own process: ``kill()`` is a real SIGKILL."""

    def __init__(self, *models: str, api_keys: tuple[str, ...] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, str(PEER_PROCESS), "--port", str(self.port)]
        for model in models:
            command += ["--model", model]
        for key in api_keys:
            command += ["--api-key", key]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        headers = {"authorization": f"Bearer {api_keys[0]}"} if api_keys else {}

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"peer exited: {self.proc.stderr.read()!r}")  # type: ignore[union-attr]
            try:
                return httpx.get(f"{self.url}/health", headers=headers, timeout=1).is_success
            except httpx.TransportError:
                return False

        wait_until(healthy, 30)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


@pytest.fixture
def peer_process() -> Iterator[Any]:
    started: list[PeerProcess] = []

    def start(*models: str, api_keys: tuple[str, ...] = ()) -> PeerProcess:
        started.append(PeerProcess(*models, api_keys=api_keys))
        return started[-1]

    yield start
    for peer in started:
        peer.kill()


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
            a.app.state.peers.peers[0].config.url = b.url
            a.run(a.app.state.peers.check_all())
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
        assert a.app.state.peers.peers[0].inflight == 0


# --------------------------------------------------------------------------- replicas


def test_each_request_goes_to_the_least_loaded_replica() -> None:
    with pair(alpha(), alpha()) as (a, b):
        listed = httpx.get(f"{a.url}/v1/models/alpha").json()
        assert "peer" not in listed and listed["peers"] == ["b"]

        async def stream(where: list[str | None]) -> None:
            async with httpx.AsyncClient(timeout=30) as client:
                body = {
                    "model": "alpha",
                    "stream": True,
                    "messages": [{"role": "user", "content": " ".join(LONG.split()[:100])}],
                }
                async with client.stream(
                    "POST", f"{a.url}/v1/chat/completions", json=body
                ) as response:
                    where.append(response.headers.get("x-mlx-gateway-peer"))
                    async for _ in response.aiter_bytes():
                        pass

        async def three_at_once() -> list[str | None]:
            where: list[str | None] = []
            first = asyncio.create_task(stream(where))
            while not where:
                await asyncio.sleep(0.01)
            second = asyncio.create_task(stream(where))
            while len(where) < 2:
                await asyncio.sleep(0.01)
            third = asyncio.create_task(stream(where))
            await asyncio.gather(first, second, third)
            return where

        where = asyncio.run(three_at_once())
        # 1st: here (a tie goes to this gateway); 2nd: the idle peer; 3rd: a tie again
        assert where == [None, "b", None]
        assert b.registry.resolve("alpha").status().state == "ready"  # it served the 2nd
        assert a.app.state.peers.peers[0].inflight == 0
        assert chat(a, "alpha", "after").headers.get("x-mlx-gateway-peer") is None


def test_load_and_unload_of_a_peer_model_are_done_at_the_peer() -> None:
    with pair(alpha(), {"model_path": "fake/ok", "served_model_name": "mine"}) as (a, b):
        there = b.registry.resolve("alpha")
        loaded = httpx.post(f"{a.url}/v1/models/alpha/load", timeout=30)
        assert loaded.status_code == 200, loaded.text
        assert loaded.headers["x-mlx-gateway-peer"] == "b"
        assert loaded.json()["state"] == "ready" and there.status().state == "ready"
        unloaded = httpx.post(f"{a.url}/v1/models/alpha/unload", timeout=30)
        assert unloaded.status_code == 200 and unloaded.headers["x-mlx-gateway-peer"] == "b"
        wait_until(lambda: there.status().state == "unloaded")
        # This gateway's own model stays here.
        mine = httpx.post(f"{a.url}/v1/models/mine/load", timeout=30)
        assert mine.status_code == 200 and "x-mlx-gateway-peer" not in mine.headers
        # A name nobody serves: this gateway's 404.
        assert httpx.post(f"{a.url}/v1/models/nope/load", timeout=30).status_code == 404


def test_a_conversation_goes_on_at_the_replica_that_stores_it() -> None:
    with pair(alpha(), alpha()) as (a, b):
        # Made at the peer (b) directly: only b stores it.
        first = sdk(b).responses.create(model="alpha", input="first turn")
        # Sent to a, which serves alpha too and is the less loaded (a tie goes to a):
        # the turn must go to b, where previous_response_id is known.
        raw = sdk(a).responses.with_raw_response.create(
            model="alpha", input="second turn", previous_response_id=first.id
        )
        assert raw.headers.get("x-mlx-gateway-peer") == "b"
        second = raw.parse()
        assert second.previous_response_id == first.id
        # Made at a: it stays at a even with b idle.
        here = sdk(a).responses.create(model="alpha", input="local turn")
        assert b.app.state.registry.resolve("alpha").status().inflight == 0
        again = sdk(a).responses.with_raw_response.create(
            model="alpha", input="next", previous_response_id=here.id
        )
        assert again.headers.get("x-mlx-gateway-peer") is None
        # An id nobody stores: the usual choice, and the usual 400 from it.
        with pytest.raises(openai.BadRequestError) as info:
            sdk(a).responses.create(model="alpha", input="x", previous_response_id="resp_none")
        assert info.value.code == "previous_response_not_found"


@pytest.mark.slow  # a gateway in its own process
def test_failover_when_a_peer_is_killed(peer_process: Any) -> None:
    doomed = peer_process("alpha")
    with LiveGateway(alpha()) as c:
        peers = [PeerConfig(url=doomed.url, name="doomed"), PeerConfig(url=c.url, name="c")]
        with LiveGateway({"model_path": "fake/ok"}, peers=peers, peer_check_interval=60.0) as a:
            assert chat(a, "alpha", "first").headers["x-mlx-gateway-peer"] == "doomed"

            # a stream in progress when its peer dies ends at once with an error event
            with httpx.stream(
                "POST",
                f"{a.url}/v1/chat/completions",
                json={
                    "model": "alpha",
                    "stream": True,
                    "messages": [{"role": "user", "content": LONG}],
                },
                timeout=30,
            ) as response:
                assert response.headers["x-mlx-gateway-peer"] == "doomed"
                lines = response.iter_lines()
                assert next(lines).startswith("data: ")
                doomed.kill()
                started = time.monotonic()
                rest = list(lines)
                assert time.monotonic() - started < 10
            events = [json.loads(x[6:]) for x in rest if x.startswith("data: {")]
            assert events[-1]["error"]["code"] == "peer_unavailable"

            # the next requests go to the replica still up, with no health check between
            response = chat(a, "alpha", "second")
            assert response.status_code == 200 and response.headers["x-mlx-gateway-peer"] == "c"
            health = httpx.get(f"{a.url}/health").json()["peers"]
            assert [p["state"] for p in health] == ["down", "up"]
            assert "cannot reach it" in health[0]["error"]
            listed = httpx.get(f"{a.url}/v1/models/alpha").json()
            assert listed["peer"] == "c" and listed["peers"] == ["c"]
            metrics = httpx.get(f"{a.url}/metrics").text
            for line in (
                'mlx_gateway_peer_up{peer="doomed"} 0',
                'mlx_gateway_peer_up{peer="c"} 1',
                'mlx_gateway_peer_inflight{peer="doomed"} 0',
                'mlx_gateway_peer_models{peer="c"} 1',
                'mlx_gateway_peer_requests_total{peer="doomed",outcome="answered"} 2',
                'mlx_gateway_peer_requests_total{peer="c",outcome="answered"} 1',
            ):
                assert line in metrics.splitlines(), (line, metrics)


@pytest.mark.slow  # a gateway in its own process
def test_a_model_whose_only_peer_is_down_is_a_clear_503(peer_process: Any) -> None:
    doomed = peer_process("beta=fake/ok")
    peers = [PeerConfig(url=doomed.url, name="mac-2")]
    with LiveGateway({"model_path": "fake/ok"}, peers=peers, peer_check_interval=60.0) as a:
        assert chat(a, "beta", "up").status_code == 200
        doomed.kill()
        down = chat(a, "beta", "down")
        assert down.status_code == 502
        assert down.json()["error"]["code"] == "peer_unavailable"
        assert "mac-2" in down.json()["error"]["message"]
        again = chat(a, "beta", "still down")  # now known down: not even tried
        assert again.status_code == 503 and "Retry-After" in again.headers
        assert "'mac-2'" in again.json()["error"]["message"]
        claude = httpx.post(
            f"{a.url}/v1/messages",
            json={"model": "beta", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
        )
        assert claude.status_code == 503 and claude.json()["type"] == "error"
        metrics = httpx.get(f"{a.url}/metrics").text.splitlines()
        assert 'mlx_gateway_peer_requests_total{peer="mac-2",outcome="answered"} 1' in metrics
        # The 502: tried and unreachable. The 503s: known down, never tried.
        assert 'mlx_gateway_peer_requests_total{peer="mac-2",outcome="failed"} 1' in metrics
        assert 'mlx_gateway_peer_up{peer="mac-2"} 0' in metrics


def test_a_peer_that_comes_back_is_used_again() -> None:
    with LiveGateway(alpha()) as b:
        peers = [PeerConfig(url=b.url, name="b")]
        with LiveGateway({"model_path": "fake/ok"}, peers=peers, peer_check_interval=0.2) as a:
            directory = a.app.state.peers
            directory.mark_down(directory.peers[0], "test: pretend it went away")
            wait_until(lambda: directory.peers[0].up, 5)
            assert chat(a, "alpha", "back").headers["x-mlx-gateway-peer"] == "b"


# --------------------------------------------------------------------------- keys


@pytest.mark.slow  # a gateway in its own process
def test_peer_keys(peer_process: Any) -> None:
    guarded = peer_process("alpha", api_keys=("peer-secret",))
    peers = [
        PeerConfig(url=guarded.url, name="right", api_key="peer-secret"),
        PeerConfig(url=guarded.url, name="wrong", api_key="not-the-key"),
    ]
    with LiveGateway({"model_path": "fake/ok"}, peers=peers, api_keys=["client-key"]) as a:
        health = {p["name"]: p for p in httpx.get(f"{a.url}/health").json()["peers"]}
        assert health["right"]["state"] == "up"
        assert health["wrong"]["state"] == "down"
        assert "refused this gateway's key" in health["wrong"]["error"]
        # the client's key opens this gateway; the peer only knows its own key
        answer = sdk(a, "client-key").chat.completions.create(
            model="alpha", messages=[{"role": "user", "content": "keyed"}]
        )
        assert answer.choices[0].message.content == "keyed "
        with pytest.raises(openai.AuthenticationError):
            sdk(a, "peer-secret").chat.completions.create(
                model="alpha", messages=[{"role": "user", "content": "x"}]
            )


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
