"""Every way a worker can fail after an answer's headers went out ends the answer
whole: a stream with its API's error event, a non-streamed answer (its ``200`` and
keep-alive spaces already sent) with its API's error object after the spaces, never
a cut connection, which the official SDKs take for a network fault and send again
(into the same failure) before ending with "Connection error".

The ways: a stuck step (the watchdog kills the worker, and the answer's one re-run
on the next worker gets stuck too), a request that crashes every worker it runs on,
a kill from outside (once: a whole answer is computed again; twice: it fails), a
forced unload, an admin's cancel, and a config reload. Each streamed and whole,
through the real ``openai`` and ``anthropic`` SDKs with their default retries
against the real gateway over TCP (fake workers over real ZeroMQ); the gateway
must have seen exactly one request. A surface is one entry of :data:`SURFACES`
(Ollama's whole answer is not padded: its clients wait without a limit and would
read a ``200`` as an answer, so its failures stay HTTP errors; the rest holds for
it too).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from mlx_gateway.supervisor.gateway import gateway_of
from tests.supervisor.fakes import fake_config
from tests.supervisor.live import LiveGateway

pytestmark = pytest.mark.slow

MODEL = "fake/ok"
INTERVAL = 0.25
"""Keep-alive spaces this often: a whole answer has its headers out after this long."""
HANG = 3.0
"""``hang_timeout`` (and so the step limit): the error must come within a limit for each
stuck worker and two more (the workers' spawns and kills, slow on a busy 2-core box),
far below what a hang would take (the SDKs wait 600 s, and then retry)."""
SERVER = {"stream_keepalive": INTERVAL, "hang_timeout": HANG}
PREFILL = "prefill 2.5 hello there"
"""A request that stays silent for 2.5 s (headers and spaces out), then is answered."""


@dataclass
class Outcome:
    """How a request ended for the SDK's user: its text, or its error's message."""

    text: str | None = None
    error: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class Surface:
    path: str
    whole: Callable[[str, str], Outcome]
    """``(gateway url, prompt)`` → the outcome of a non-streamed request."""
    stream: Callable[[str, str], Outcome]


def openai_whole(url: str, text: str) -> Outcome:
    with openai.OpenAI(base_url=f"{url}/v1", api_key="unused") as client:
        reply = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": text}]
        )
    if reply.choices:
        return Outcome(text=reply.choices[0].message.content)
    # The body was the error object: the SDK hands it on as the result's ``error``.
    error = (reply.model_extra or {})["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    return Outcome(error=f"{error['code']}: {error['message']}")


def openai_stream(url: str, text: str) -> Outcome:
    with openai.OpenAI(base_url=f"{url}/v1", api_key="unused") as client:
        parts = []
        try:
            for chunk in client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": text}], stream=True
            ):
                parts += [c.delta.content or "" for c in chunk.choices]
        except openai.APIError as exc:
            assert isinstance(exc.body, dict), exc
            return Outcome(error=f"{exc.body['code']}: {exc.body['message']}")
    return Outcome(text="".join(parts))


def claude_whole(url: str, text: str) -> Outcome:
    with anthropic.Anthropic(base_url=url, api_key="unused") as client:
        message = client.messages.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": text}]
        )
    if message.type == "message":
        return Outcome(text="".join(b.text for b in message.content if b.type == "text"))
    # ``{"type": "error", "error": {"type", "message"}}``: the SDK's Message of type "error".
    assert message.type == "error", message
    error = (message.model_extra or {})["error"]
    assert error["type"] == "api_error", error
    return Outcome(error=error["message"])


def claude_stream(url: str, text: str) -> Outcome:
    with anthropic.Anthropic(base_url=url, api_key="unused") as client:
        try:
            with client.messages.stream(
                model=MODEL, max_tokens=64, messages=[{"role": "user", "content": text}]
            ) as stream:
                return Outcome(text="".join(stream.text_stream))
        except anthropic.APIStatusError as exc:
            assert isinstance(exc.body, dict) and exc.body["type"] == "error", exc.body
            return Outcome(error=exc.body["error"]["message"])


def ollama_whole(url: str, text: str) -> Outcome:
    try:
        reply = ollama.Client(host=url).chat(
            model=MODEL, messages=[{"role": "user", "content": text}], stream=False
        )
    except ollama.ResponseError as exc:
        return Outcome(error=exc.error)
    return Outcome(text=reply.message.content)


def ollama_stream(url: str, text: str) -> Outcome:
    try:
        chunks = ollama.Client(host=url).chat(
            model=MODEL, messages=[{"role": "user", "content": text}], stream=True
        )
        return Outcome(text="".join(chunk.message.content or "" for chunk in chunks))
    except ollama.ResponseError as exc:
        return Outcome(error=exc.error)


SURFACES = {
    "openai": Surface("/v1/chat/completions", openai_whole, openai_stream),
    "anthropic": Surface("/v1/messages", claude_whole, claude_stream),
    "ollama": Surface("/api/chat", ollama_whole, ollama_stream),
}
MODES = ("whole", "stream")


@pytest.fixture
def gateway() -> Iterator[LiveGateway]:
    """A gateway of its own per test: the tests kill workers (three crashes within a
    minute would stop the model as a crash loop)."""
    with LiveGateway({"model_path": MODEL}, **SERVER) as gw:
        yield gw


def send(gw: LiveGateway, surface: str, mode: str, text: str) -> Callable[[], Outcome]:
    """Send the request from a thread; the returned call waits for its outcome, and
    checks that the gateway saw this one request (no SDK retry)."""
    call = getattr(SURFACES[surface], mode)
    out: dict[str, Any] = {}

    def run() -> None:
        started = time.monotonic()
        try:
            out["outcome"] = call(gw.url, text)
        except Exception as exc:  # a connection error would show here
            out["outcome"] = Outcome(error=f"raised {type(exc).__name__}: {exc}")
        out["outcome"].seconds = time.monotonic() - started

    thread = threading.Thread(target=run)
    thread.start()

    def outcome() -> Outcome:
        thread.join(60)
        assert not thread.is_alive(), "no answer within 60 s"
        got: Outcome = out["outcome"]
        assert not (got.error or "").startswith("raised"), got
        requests = gateway_of(gw.app).recorder.http_requests
        path = SURFACES[surface].path
        deadline = time.monotonic() + 5
        while not (seen := sum(v for k, v in requests.values.items() if k[0] == path)):
            assert time.monotonic() < deadline, requests.values
            time.sleep(0.02)
        assert seen == 1, requests.values
        return got

    return outcome


def worker_pid(gw: LiveGateway, other_than: int | None = None) -> int:
    """The pid of the model's worker once it runs with a request in flight (and is
    not ``other_than``), and that request's headers went out."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = httpx.get(f"{gw.url}/v1/models/{MODEL}").json()
        if status.get("pid") and status["pid"] != other_than and status.get("inflight"):
            time.sleep(3 * INTERVAL)  # a whole answer padded by now
            return int(status["pid"])
        time.sleep(0.05)
    raise AssertionError(f"no worker with a request in flight: {status}")


CASES = [(surface, mode) for surface in SURFACES for mode in MODES]


@pytest.mark.parametrize(("surface", "mode"), CASES)
def test_a_stuck_step_ends_with_the_step_and_the_log_within_a_limit_per_stall(
    gateway: LiveGateway, surface: str, mode: str
) -> None:
    """The step hangs on every worker: a whole answer is computed once more on the
    next worker, stuck again, and then ends with the error a stream gets at once."""
    got = send(gateway, surface, mode, "stuck here")()
    assert got.error is not None, got
    assert f"model '{MODEL}'" in got.error and "stuck: its step 'decode of" in got.error
    assert "step_timeout 3 s" in got.error, got.error
    assert "last log lines" in got.error and "step stuck in" in got.error, got.error
    stalls = 2 if mode == "whole" else 1
    assert gateway.registry.resolve(MODEL).stalls == {"decode": stalls}
    assert got.seconds < (stalls + 2) * HANG, got.seconds


@pytest.mark.parametrize(("surface", "mode"), CASES)
def test_a_request_that_crashes_every_worker_ends_with_the_crash(
    gateway: LiveGateway, surface: str, mode: str
) -> None:
    got = send(gateway, surface, mode, "die 0.75")()
    assert got.error is not None and "SIGKILL" in got.error, got
    assert "dying on purpose" in got.error, got.error  # the worker's last log line
    assert gateway.registry.resolve(MODEL).crashes == (2 if mode == "whole" else 1)


@pytest.mark.parametrize(("surface", "mode"), CASES)
def test_a_worker_killed_once(gateway: LiveGateway, surface: str, mode: str) -> None:
    """A stream ends with the kill; a whole answer is computed again, and answered."""
    outcome = send(gateway, surface, mode, PREFILL)
    os.kill(worker_pid(gateway), signal.SIGKILL)
    got = outcome()
    if mode == "whole":
        assert got.text == f"{PREFILL} ", got
    else:
        assert got.error is not None and "killed by SIGKILL" in got.error, got


@pytest.mark.parametrize("surface", SURFACES)
def test_a_whole_answer_killed_twice_ends_with_the_second_kill(
    gateway: LiveGateway, surface: str
) -> None:
    outcome = send(gateway, surface, "whole", PREFILL)
    first = worker_pid(gateway)
    os.kill(first, signal.SIGKILL)
    os.kill(worker_pid(gateway, other_than=first), signal.SIGKILL)
    got = outcome()
    assert got.error is not None and "killed by SIGKILL" in got.error, got


def unload(gw: LiveGateway) -> str:
    """A forced unload (``POST /v1/models/{id}/unload``); what the error says."""
    unloaded = httpx.post(f"{gw.url}/v1/models/{MODEL}/unload", json={"force": True})
    assert unloaded.status_code == 200, unloaded.text
    return "unloaded by an admin request"


def cancel(gw: LiveGateway) -> str:
    """An admin's cancel of the request (``POST /v1/requests/{id}/cancel``)."""
    (entry,) = httpx.get(f"{gw.url}/v1/requests").json()["data"]
    cancelled = httpx.post(f"{gw.url}/v1/requests/{entry['id']}/cancel")
    assert cancelled.status_code == 200, cancelled.text
    return "cancelled by an admin"


@pytest.mark.parametrize("admin", [unload, cancel])
@pytest.mark.parametrize(("surface", "mode"), CASES)
def test_an_admin_stop_ends_with_its_reason_at_once(
    gateway: LiveGateway, surface: str, mode: str, admin: Callable[[LiveGateway], str]
) -> None:
    outcome = send(gateway, surface, mode, "prefill 30 hello there")
    worker_pid(gateway)
    reason = admin(gateway)
    got = outcome()
    assert got.error is not None and reason in got.error, got
    # At once (an unload: after shutdown_grace), not at the end 30 s after the start.
    assert got.seconds < 15, got


def reload(gw: LiveGateway) -> None:
    """A config reload that changes the model's entry (its worker is replaced once
    its requests are done)."""
    new = fake_config({"model_path": MODEL, "idle_timeout": 77}, port=gw.port, **SERVER)
    report = gw.run(gw.registry.reload(new))
    assert report["changed"] == [MODEL], report


@pytest.mark.parametrize(("surface", "mode"), CASES)
def test_a_reload_lets_the_old_worker_finish_the_answer(
    gateway: LiveGateway, surface: str, mode: str
) -> None:
    outcome = send(gateway, surface, mode, PREFILL)
    worker_pid(gateway)
    reload(gateway)
    assert outcome().text == f"{PREFILL} "


@pytest.mark.parametrize(("surface", "mode"), CASES)
def test_a_worker_dying_while_a_reload_replaces_it_ends_the_answer(
    gateway: LiveGateway, surface: str, mode: str
) -> None:
    """The replaced worker dies under a request that kills every worker: a whole
    answer's re-run either restarts the retired model (and dies again) or, once the
    retired model closed, is refused at once; either way an error, never a wait."""
    outcome = send(gateway, surface, mode, "die 2")
    worker_pid(gateway)
    reload(gateway)
    got = outcome()
    assert got.error is not None, got
    assert "SIGKILL" in got.error or "its config entry changed" in got.error, got
    assert got.seconds < 10, got
