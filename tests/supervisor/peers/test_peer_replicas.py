"""Peer gateways serving the same model: each request goes to the least loaded
replica, a conversation stays where its cache is, a dead peer fails over (or is a
clear 503) and one that comes back is used again; peers' keys.

Gateways are real, on local ports, with fake workers behind each over real ZeroMQ;
the peer that must die is a gateway in its own process, killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import openai
import pytest

from mlx_gateway.supervisor.config.schema import PeerConfig
from mlx_gateway.supervisor.gateway import gateway_of

from ..live import LiveGateway
from .gateways import LONG, alpha, chat, pair, sdk, wait_until

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
        assert gateway_of(a.app).peers.peers[0].inflight == 0
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
        assert gateway_of(b.app).registry.resolve("alpha").status().inflight == 0
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
            directory = gateway_of(a.app).peers
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
