"""Many streaming clients at once, clients that leave mid-stream, and workers killed
or frozen under load: the real gateway over real TCP, fake workers behind it.

The property throughout: no request is lost or hangs. Each one ends, within a
bound, in a complete answer, a clear OpenAI-shaped 429/503 before the stream, or
(when its worker died under it) an error event followed by ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from ..supervisor.live import LiveGateway
from ..waiting import own_tasks, until

pytestmark = pytest.mark.slow

MODELS = ("fake/one", "fake/two", "fake/three")


@dataclass
class Outcome:
    """One streaming request as its client saw it."""

    status: int
    text: str = ""
    request_id: str | None = None
    finish_reason: str | None = None
    error: dict[str, Any] | None = None
    done: bool = False
    seconds: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


async def stream_chat(
    http: httpx.AsyncClient, model: str, prompt: str, *, leave_after: int | None = None
) -> Outcome:
    """Stream one chat completion; with ``leave_after``, close the connection after
    that many content events (the client goes away)."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True}
    started = time.monotonic()
    async with http.stream("POST", "/v1/chat/completions", json=body) as r:
        out = Outcome(r.status_code, headers=dict(r.headers))
        if r.status_code != 200:
            await r.aread()
            out.error = r.json()["error"]
            out.seconds = time.monotonic() - started
            return out
        contents = 0
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue  # keep-alive comments while a model loads, blank lines
            data = line[len("data: ") :]
            if data == "[DONE]":
                out.done = True
                break
            event = json.loads(data)
            if "error" in event:
                out.error = event["error"]
                continue
            out.request_id = event["id"]
            for choice in event["choices"]:
                out.text += choice["delta"].get("content") or ""
                out.finish_reason = choice.get("finish_reason") or out.finish_reason
            contents += 1
            if leave_after is not None and contents >= leave_after:
                break  # leaving the block closes the connection mid-stream
    out.seconds = time.monotonic() - started
    return out


def client(gateway: LiveGateway, connections: int = 300) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
    return httpx.AsyncClient(base_url=gateway.url, limits=limits, timeout=60)


def answered(out: Outcome, prompt: str) -> bool:
    return out.status == 200 and out.done and out.error is None and out.text == prompt + " "


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def wait_idle(gateway: LiveGateway, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while any(h.inflight for h in gateway.registry.handles):
        assert time.monotonic() < deadline, [(h.name, h.inflight) for h in gateway.registry.handles]
        time.sleep(0.05)


async def test_200_concurrent_streams_across_three_models() -> None:
    models = [{"model_path": name, "max_concurrency": 16, "max_queue": 80} for name in MODELS]
    with LiveGateway(*models) as gw:
        prompts = [f"client {i} says w{i % 7} x{i % 5} y z" for i in range(200)]
        async with client(gw) as http:
            started = time.monotonic()
            outcomes = await asyncio.wait_for(
                asyncio.gather(
                    *(stream_chat(http, MODELS[i % 3], p) for i, p in enumerate(prompts))
                ),
                120,
            )
            wall = time.monotonic() - started
        lost = [o for o, p in zip(outcomes, prompts, strict=True) if not answered(o, p)]
        assert not lost, lost[:3]
        seconds = [o.seconds for o in outcomes]
        logging.getLogger(__name__).warning(
            "200 streams over 3 models: %.2f s wall, p50 %.2f s, p99 %.2f s",
            wall,
            percentile(seconds, 0.5),
            percentile(seconds, 0.99),
        )
        wait_idle(gw)
        assert all(h.crashes == 0 for h in gw.registry.handles)


async def test_over_the_limits_is_a_clear_429_never_a_hang() -> None:
    """Beyond max_concurrency + max_queue a model answers 429 with Retry-After at
    once; everyone it admitted gets a whole answer.

    The limits are filled first with long answers, and the extra requests are sent
    only once the gateway holds exactly ``max_concurrency`` running and ``max_queue``
    waiting per model, so the outcome does not depend on how fast the machine is.
    """
    concurrency, queue = 4, 8
    models = [
        {"model_path": name, "max_concurrency": concurrency, "max_queue": queue} for name in MODELS
    ]
    with LiveGateway(*models) as gw:
        handles = {h.name: h for h in gw.registry.handles}
        async with client(gw) as http:
            # Start the workers first, so that every request meets the same limits.
            await asyncio.gather(*(stream_chat(http, m, "warm") for m in MODELS))
            long_prompts = {
                m: [f"{m} {i} " + " ".join(f"w{k}" for k in range(300)) for i in range(12)]
                for m in MODELS
            }
            admitted = [
                (asyncio.create_task(stream_chat(http, m, p)), p)
                for m in MODELS
                for p in long_prompts[m]
            ]
            deadline = time.monotonic() + 60
            while any(
                (handles[m].inflight, handles[m].waiting) != (concurrency, queue) for m in MODELS
            ):
                assert time.monotonic() < deadline, [
                    (m, handles[m].inflight, handles[m].waiting) for m in MODELS
                ]
                await asyncio.sleep(0.02)

            extra = await asyncio.wait_for(
                asyncio.gather(
                    *(stream_chat(http, m, f"extra {i} for {m}") for m in MODELS for i in range(5))
                ),
                30,
            )
            assert not any(task.done() for task, _ in admitted)  # refused while they ran
            for out in extra:
                assert out.status == 429, out
                assert out.error is not None and out.error["message"], out
                assert int(out.headers["retry-after"]) >= 1, out.headers

            outcomes = await asyncio.wait_for(asyncio.gather(*(task for task, _ in admitted)), 120)
            lost = [o for o, (_, p) in zip(outcomes, admitted, strict=True) if not answered(o, p)]
            assert not lost, lost[:3]

            wait_idle(gw)
            after = await asyncio.gather(*(stream_chat(http, m, "after the rush") for m in MODELS))
            assert all(answered(o, "after the rush") for o in after), after


async def test_clients_leaving_mid_stream_free_their_slots(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="mlx_gateway.worker.output")
    with LiveGateway(*({"model_path": name} for name in MODELS)) as gw:
        async with client(gw) as http:
            long_prompt = " ".join(f"w{i}" for i in range(400))  # 8 s of words each
            leavers = [
                stream_chat(http, MODELS[i % 3], long_prompt, leave_after=2) for i in range(30)
            ]
            stayers = [stream_chat(http, MODELS[i % 3], f"stay {i} a b") for i in range(30)]
            outcomes = await asyncio.wait_for(asyncio.gather(*leavers, *stayers), 60)
        left, stayed = outcomes[:30], outcomes[30:]
        assert all(o.status == 200 and o.request_id for o in left)
        assert all(o.seconds < 5 for o in left)  # they left long before the end
        assert all(answered(o, f"stay {i} a b") for i, o in enumerate(stayed))
        # Every worker was told, and dropped the request (its batch slot is free).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            missing = [o.request_id for o in left if f"cancelled {o.request_id}" not in caplog.text]
            if not missing:
                break
            await asyncio.sleep(0.05)
        assert not missing, missing[:3]
        wait_idle(gw)
        assert all(h.crashes == 0 for h in gw.registry.handles)


async def test_kill_9_under_load_fails_fast_and_recovers() -> None:
    with LiveGateway({"model_path": MODELS[0]}, {"model_path": MODELS[1]}) as gw:
        async with client(gw) as http:
            await stream_chat(http, MODELS[0], "warm")
            victim = gw.registry.resolve(MODELS[0])
            other = gw.registry.resolve(MODELS[1])
            pid = victim.pid
            long_prompt = " ".join(f"w{i}" for i in range(300))
            async with own_tasks() as tasks:
                for i in range(40):
                    tasks.append(asyncio.create_task(stream_chat(http, MODELS[i % 2], long_prompt)))
                started = time.monotonic()
                # Mid-answer: the victim holds max_concurrency (8) requests, the rest
                # wait in the gateway; however long the machine takes to get there.
                limit = victim.config.max_concurrency
                await until(
                    lambda: (victim.inflight, other.inflight) == (limit, limit),
                    60,
                    lambda: (victim.inflight, victim.waiting, other.inflight),
                )
                killed_at = time.monotonic()
                os.kill(pid, signal.SIGKILL)
                victims = [t for i, t in enumerate(tasks) if i % 2 == 0]
                done = await asyncio.wait_for(asyncio.gather(*victims), 30)
                streamed = failed_before_stream = recovered = 0
                for out in done:
                    if out.error is not None:
                        # At once (not after a timeout): mid-answer, an error event then
                        # [DONE]; sent but not started yet, a plain 503 naming the crash.
                        assert "SIGKILL" in out.error["message"], out
                        assert out.seconds - (killed_at - started) < 3, out
                        if out.status == 200:
                            assert out.done and out.error["code"] == "worker_crashed", out
                            streamed += 1
                        else:
                            assert out.status == 503, out
                            failed_before_stream += 1
                    else:
                        # Still queued in the gateway (beyond max_concurrency): it waited
                        # for the restart and got its whole answer.
                        assert answered(out, long_prompt), out
                        recovered += 1
                # max_concurrency (8) of them were in flight on the worker
                assert streamed + failed_before_stream >= limit
                assert streamed + failed_before_stream + recovered == len(victims)
                # The other model's streams were untouched.
                others = await asyncio.wait_for(asyncio.gather(*tasks[1::2]), 30)
                assert all(answered(o, long_prompt) for o in others)
            # The next request starts a fresh worker.
            again = await stream_chat(http, MODELS[0], "back again")
            assert answered(again, "back again")
            assert victim.pid != pid and victim.crashes == 1


async def test_frozen_worker_is_killed_by_the_hang_watchdog() -> None:
    """SIGSTOP a busy worker: no heartbeat for hang_timeout → it is killed, its
    streams end with an error and [DONE], and the next request restarts it."""
    with LiveGateway({"model_path": MODELS[0]}, hang_timeout=2.0) as gw:
        async with client(gw) as http:
            await stream_chat(http, MODELS[0], "warm")
            victim = gw.registry.resolve(MODELS[0])
            pid = victim.pid
            long_prompt = " ".join(f"w{i}" for i in range(300))
            async with own_tasks() as tasks:
                for _ in range(5):
                    tasks.append(asyncio.create_task(stream_chat(http, MODELS[0], long_prompt)))
                # busy: all five on the worker
                await until(lambda: victim.inflight == 5, 60, lambda: victim.inflight)
                os.kill(pid, signal.SIGSTOP)
                frozen_at = time.monotonic()
                try:
                    done = await asyncio.wait_for(asyncio.gather(*tasks), 15)
                finally:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
            ended = time.monotonic() - frozen_at
            for out in done:
                assert out.status == 200 and out.done and out.error is not None, out
            assert 1.5 < ended < 8, ended
            again = await stream_chat(http, MODELS[0], "thawed")
            assert answered(again, "thawed")
            assert victim.pid != pid


async def test_stuck_step_is_killed_and_its_requests_end_with_a_clear_error() -> None:
    """A step that makes no progress while the worker lives and heartbeats (the
    fake's ``stuck``: its heartbeats report the step stalled): past step_timeout
    (auto: hang_timeout) the worker is killed, every request on it ends with an
    error naming the model and the step, in each API's shape, and it shows in the
    log, /metrics and /v1/models; the next request starts it again."""
    with LiveGateway({"model_path": MODELS[0]}, hang_timeout=2.0) as gw:
        async with client(gw) as http:
            await stream_chat(http, MODELS[0], "warm")
            victim = gw.registry.resolve(MODELS[0])
            pid = victim.pid
            async with own_tasks() as tasks:
                long_prompt = " ".join(f"w{i}" for i in range(300))
                streams = [
                    asyncio.create_task(stream_chat(http, MODELS[0], long_prompt)) for _ in range(3)
                ]

                def ask(path: str, content: str) -> asyncio.Task[httpx.Response]:
                    messages = [{"role": "user", "content": content}]
                    body = {"model": MODELS[0], "messages": messages}
                    return asyncio.create_task(http.post(path, json=body))

                plain = ask("/v1/chat/completions", "w " * 50)
                ollama = ask("/api/chat", "w " * 80)
                tasks.extend([*streams, plain, ollama])
                # all five on the worker before the stuck one joins their batch
                await until(lambda: victim.inflight == 5, 60, lambda: victim.inflight)
                stuck = asyncio.create_task(stream_chat(http, MODELS[0], "stuck here"))
                tasks.append(stuck)
                stuck_at = time.monotonic()
                done = await asyncio.wait_for(asyncio.gather(*streams, stuck), 20)
                ended = time.monotonic() - stuck_at
                for out in done:
                    assert out.status == 200 and out.done and out.error is not None, out
                    message = out.error["message"]
                    assert f"model '{MODELS[0]}'" in message and "stuck" in message, message
                    assert "decode of" in message and "step_timeout" in message, message
                assert ended < 12, ended  # the limit (2 s) + a heartbeat + a check, with slack
                # A plain answer whose 200 already went out (it waited stream_keepalive
                # seconds) is computed again on the model's next worker (see
                # reply/answer.py) and arrives whole; one still before its headers gets
                # the 503 body.
                answer = await asyncio.wait_for(plain, 20)
                if answer.status_code == 200:
                    content = answer.json()["choices"][0]["message"]["content"]
                    assert content == "w " * 50, answer.text
                else:
                    assert answer.status_code == 503, answer.text
                    assert "stuck" in answer.json()["error"]["message"], answer.text
                line = (await asyncio.wait_for(ollama, 10)).text.strip().splitlines()[-1]
                assert "stuck" in json.loads(line)["error"], line
                status = (await http.get(f"/v1/models/{MODELS[0]}")).json()
                assert status["stalls"] == 1, status
                if answer.status_code != 200:  # (a re-run started the model again: no error)
                    assert "stuck" in status["error"], status
            again = await stream_chat(http, MODELS[0], "back again")
            assert answered(again, "back again")
            assert victim.pid != pid and victim.crashes == 1
            metrics = (await http.get("/metrics")).text
            assert f'mlx_gateway_model_stalls_total{{model="{MODELS[0]}",step="decode"}} 1' in (
                metrics
            )
