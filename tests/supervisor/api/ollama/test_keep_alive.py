"""Per-request model lifetimes: Ollama's ``keep_alive`` (with the official client),
the same field and LM Studio's ``ttl`` on the OpenAI and Anthropic routes (with
their SDKs), the server's cap and off switch; fake workers, real TCP."""

from __future__ import annotations

import contextlib
import math
import time

import anthropic
import httpx
import openai
import pytest

from mlx_gateway.supervisor.engine.keep_alive import parse_keep_alive
from mlx_gateway.supervisor.errors import BadRequest
from mlx_gateway.supervisor.pool.keep_alive import lifetime
from mlx_gateway.supervisor.pool.reaper import reapable
from tests.e2e.gateway import wait_until
from tests.supervisor.live import LiveGateway

from .conftest import Connect

pytestmark = pytest.mark.timeout(120)

MODEL = "fake/ok"
HELLO = [{"role": "user", "content": "say hello"}]


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (0, 0.0),
        (300, 300.0),
        (-1, math.inf),
        ("-1", math.inf),
        ("0", 0.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        ("250ms", 0.25),
        ("-1m", math.inf),
        (None, None),
    ],
)
def test_durations_as_ollama_writes_them(value: float | str | None, seconds: float | None) -> None:
    assert parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value", ["soon", "5 minutes", "m", "", "1x"])
def test_bad_durations_name_the_field(value: str) -> None:
    with pytest.raises(BadRequest) as bad:
        parse_keep_alive(value, "ttl")
    assert bad.value.param == "ttl" and "5m" in bad.value.message


def state(gw: LiveGateway) -> str:
    return str(gw.registry.resolve(MODEL).state.public)


def test_keep_alive_zero_unloads_after_the_answer(connect: Connect) -> None:
    with LiveGateway({"model_path": MODEL, "idle_timeout": 300}) as gw:
        client = connect(gw.url)
        reply = client.chat(model=MODEL, messages=HELLO, keep_alive=0)
        assert reply.message.content == "hello"
        assert wait_until(lambda: state(gw) == "unloaded", 10)
        # streamed too: the model loads again for it and stops once the stream ended
        parts = list(client.generate(model=MODEL, prompt="say again", stream=True, keep_alive="0s"))
        assert "".join(p.response or "" for p in parts) == "again"
        assert wait_until(lambda: state(gw) == "unloaded", 10)


def test_a_short_keep_alive_replaces_idle_timeout(connect: Connect) -> None:
    with LiveGateway({"model_path": MODEL, "idle_timeout": 300}) as gw:
        client = connect(gw.url)
        client.chat(model=MODEL, messages=HELLO, keep_alive="1s")
        (entry,) = client.ps().models
        assert entry.expires_at is not None
        assert abs(entry.expires_at.timestamp() - time.time()) < 30
        assert wait_until(lambda: state(gw) == "unloaded", 15)


def test_keep_alive_forever_outlives_idle_timeout(connect: Connect) -> None:
    with LiveGateway({"model_path": MODEL, "idle_timeout": 1}) as gw:
        client = connect(gw.url)
        client.chat(model=MODEL, messages=HELLO, keep_alive=-1)
        handle = gw.registry.resolve(MODEL)
        assert lifetime(handle) is None
        assert not reapable(handle, time.monotonic() + 10**6)
        listed = httpx.get(f"{gw.url}/v1/models/{MODEL}").json()
        assert listed["keep_alive"] == -1 and listed["expires_at"] is None
        (entry,) = client.ps().models
        assert entry.expires_at is not None and entry.expires_at.year > 2200


def test_openai_and_anthropic_routes_take_keep_alive_and_ttl() -> None:
    with (
        LiveGateway({"model_path": MODEL, "idle_timeout": 300}) as gw,
        contextlib.ExitStack() as closing,
    ):
        sdk = openai.OpenAI(base_url=f"{gw.url}/v1", api_key="x", max_retries=0)
        claude = anthropic.Anthropic(base_url=gw.url, api_key="x", max_retries=0)
        closing.callback(sdk.close)
        closing.callback(claude.close)
        reply = sdk.chat.completions.create(
            model=MODEL, messages=HELLO, extra_body={"keep_alive": 0}
        )
        assert reply.choices[0].message.content == "hello"
        assert wait_until(lambda: state(gw) == "unloaded", 10)

        message = claude.messages.create(
            model=MODEL, max_tokens=50, messages=HELLO, extra_body={"ttl": 1234}
        )
        assert message.content[0].text == "hello"  # type: ignore[union-attr]
        expires = httpx.get(f"{gw.url}/v1/models/{MODEL}").json()["expires_at"]
        assert expires is not None and 1200 < expires - time.time() <= 1234

        with pytest.raises(openai.BadRequestError) as bad:
            sdk.chat.completions.create(model=MODEL, messages=HELLO, extra_body={"ttl": "x"})
        assert "ttl" in str(bad.value)


def test_the_server_caps_or_ignores_client_lifetimes(connect: Connect) -> None:
    with LiveGateway({"model_path": MODEL, "idle_timeout": 300}, max_keep_alive=60) as gw:
        client = connect(gw.url)
        client.chat(model=MODEL, messages=HELLO, keep_alive=-1)
        assert lifetime(gw.registry.resolve(MODEL)) == 60
    with LiveGateway({"model_path": MODEL, "idle_timeout": 300}, client_keep_alive=False) as gw:
        client = connect(gw.url)
        client.chat(model=MODEL, messages=HELLO, keep_alive=0)
        handle = gw.registry.resolve(MODEL)
        assert lifetime(handle) == 300 and not reapable(handle, time.monotonic() + 299)
        assert state(gw) == "ready"


def test_a_busy_model_is_not_stopped_by_keep_alive_zero(connect: Connect) -> None:
    with LiveGateway({"model_path": MODEL, "idle_timeout": 300}) as gw:
        client = connect(gw.url)
        stream = client.chat(
            model=MODEL,
            # 300 words at one a step: seconds, the second request takes a few steps
            messages=[{"role": "user", "content": " ".join(["word"] * 300)}],
            stream=True,
        )
        first = next(stream)  # a request is running now
        assert first.message.content
        client.chat(model=MODEL, messages=HELLO, keep_alive=0)  # ends beside it
        assert state(gw) == "ready"  # the stream still holds it
        rest = list(stream)
        assert rest[-1].done
        assert wait_until(lambda: state(gw) == "unloaded", 10)


def test_a_lifetime_beyond_the_calendar(connect: Connect) -> None:
    with LiveGateway({"model_path": MODEL, "idle_timeout": 300}) as gw:
        client = connect(gw.url)
        client.chat(model=MODEL, messages=HELLO, keep_alive=1e300)  # found by the fuzz suite
        (entry,) = client.ps().models
        assert entry.expires_at is not None and entry.expires_at.year > 2200


def test_keep_alive_applies_to_its_request_only(connect: Connect) -> None:
    """As in Ollama: after one ``keep_alive: 0`` (what ``ollama stop`` sends), plain
    chats (no keep_alive, as Open WebUI and LangChain send them) get the entry's
    idle_timeout again: the model loads once for all ten."""
    with LiveGateway({"model_path": MODEL, "idle_timeout": 300}) as gw:
        client = connect(gw.url)
        client.chat(model=MODEL, messages=HELLO, keep_alive=0)
        assert wait_until(lambda: state(gw) == "unloaded", 10)
        handle = gw.registry.resolve(MODEL)
        pids = set()
        for _ in range(10):
            assert client.chat(model=MODEL, messages=HELLO).message.content == "hello"
            assert state(gw) == "ready"
            pids.add(handle.pid)
        assert len(pids) == 1 and handle.crashes == 0
        assert lifetime(handle) == 300
        # and a later keep_alive still applies to its own request
        client.chat(model=MODEL, messages=HELLO, keep_alive="1s")
        assert lifetime(handle) == 1
        client.chat(model=MODEL, messages=HELLO)
        assert lifetime(handle) == 300
