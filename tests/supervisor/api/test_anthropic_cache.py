"""What Anthropic Messages clients see of the prompt cache, with the real app and a
fake worker (which reads nothing from a cache: ``cached_tokens`` 0): Claude Code's
billing block is no prompt, cache diagnostics name what changed, and every turn's log
line names the part where its prompt left the model's recent prompts."""

from __future__ import annotations

import json
import logging
from typing import Any

import httpx
import pytest

from .lm_app import OK, REASONER, app, http

pytestmark = pytest.mark.slow
__all__ = ["app", "http"]  # fixtures

DIAGNOSIS = {"anthropic-beta": "cache-diagnosis-2026-04-07"}


def billing(session: str) -> dict[str, str]:
    """Claude Code's first system block: three characters follow its session."""
    return {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.332.{session};"}


SYSTEM = {"type": "text", "text": "You are a Claude agent.", "cache_control": {"type": "ephemeral"}}


async def test_the_billing_block_is_not_prompt(http: httpx.AsyncClient) -> None:
    messages = [{"role": "user", "content": "hello there"}]
    counts = []
    for system in ([billing("1a1"), SYSTEM], [billing("34c"), SYSTEM], [SYSTEM]):
        body = {"model": OK, "system": system, "messages": messages}
        counted = await http.post("/v1/messages/count_tokens", json=body)
        assert counted.status_code == 200, counted.text
        counts.append(counted.json()["input_tokens"])
    assert counts[0] == counts[1] == counts[2] == 7  # "You are a Claude agent." + 2 words
    # A system of nothing but the billing block is no system message at all.
    body = {"model": OK, "max_tokens": 20, "system": [billing("1a1")], "messages": messages}
    body["messages"] = [{"role": "user", "content": "roles"}]
    r = await http.post("/v1/messages", json=body)
    assert r.json()["content"][0]["text"] == "user "


async def _message(http: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    body = {"model": OK, "max_tokens": 20, "system": [SYSTEM], **fields}
    r = await http.post("/v1/messages", json=body, headers=DIAGNOSIS)
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def test_cache_diagnostics_name_what_changed(http: httpx.AsyncClient) -> None:
    turn = [{"role": "user", "content": "one two three"}]
    first = await _message(http, messages=turn, diagnostics={"previous_message_id": None})
    assert first["diagnostics"] == {"cache_miss_reason": None}
    follows = {"previous_message_id": first["id"]}
    grown = [*turn, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "four"}]

    def reason(message: dict[str, Any]) -> dict[str, Any]:
        return message["diagnostics"]["cache_miss_reason"]  # type: ignore[no-any-return]

    other_system = await _message(
        http, messages=grown, diagnostics=follows, system=[{"type": "text", "text": "Be terse."}]
    )
    prompt = first["usage"]["input_tokens"]
    assert reason(other_system) == {"type": "system_changed", "cache_missed_input_tokens": prompt}
    rewritten = [{"role": "user", "content": "one two"}, *grown[1:]]
    changed = await _message(http, messages=rewritten, diagnostics=follows)
    assert reason(changed)["type"] == "messages_changed"
    tools = [{"name": "Read", "input_schema": {"type": "object"}}]
    assert reason(await _message(http, messages=grown, diagnostics=follows, tools=tools)) == {
        "type": "tools_changed",
        "cache_missed_input_tokens": prompt,
    }
    # The conversation extended, and yet nothing read from the cache (this fake
    # worker has none): the API's word for a cause the request does not show.
    assert reason(await _message(http, messages=grown, diagnostics=follows))["type"] == (
        "unavailable"
    )
    lost = await _message(http, messages=grown, diagnostics={"previous_message_id": "msg_gone"})
    assert reason(lost) == {"type": "previous_message_not_found", "cache_missed_input_tokens": 0}
    # Without the field, no diagnostics (and the message is still remembered).
    plain = await http.post("/v1/messages", json={"model": OK, "max_tokens": 5, "messages": turn})
    assert "diagnostics" not in plain.json()


async def test_streamed_diagnostics_come_on_message_start(http: httpx.AsyncClient) -> None:
    turn = [{"role": "user", "content": "one two three"}]
    first = await _message(http, messages=turn)
    body = {
        "model": REASONER,
        "max_tokens": 20,
        "system": [SYSTEM],
        "messages": turn,
        "stream": True,
        "diagnostics": {"previous_message_id": first["id"]},
    }
    async with http.stream("POST", "/v1/messages", json=body, headers=DIAGNOSIS) as r:
        text = "".join([chunk async for chunk in r.aiter_text()])
    starts = [
        json.loads(line.removeprefix("data:"))
        for line in text.splitlines()
        if line.startswith("data:") and '"message_start"' in line
    ]
    assert len(starts) == 1, text
    reason = starts[0]["message"]["diagnostics"]["cache_miss_reason"]
    assert reason["type"] == "model_changed"


async def test_the_log_names_where_a_prompt_left_the_cache(
    http: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mlx_gateway.supervisor.recorder")
    system = {"role": "system", "content": "You are a coding agent."}
    for question in ("first question", "another question"):
        messages = [system, {"role": "user", "content": question}]
        r = await http.post("/v1/chat/completions", json={"model": OK, "messages": messages})
        assert r.status_code == 200
    lines = [r.getMessage() for r in caplog.records if "prompt tokens from the cache" in r.message]
    assert len(lines) == 2, lines
    assert "/v1/chat/completions on lab/fake/ok: 0 of 2 prompt tokens from the cache" in lines[0]
    assert "left a cached prompt" not in lines[0]
    assert lines[1].endswith("; left a cached prompt at token 0, in messages[1]"), lines[1]
    anthropic = {"model": OK, "max_tokens": 5, "system": "Be brief.", "messages": []}
    for question in ("first question", "another question"):
        anthropic["messages"] = [{"role": "user", "content": question}]
        assert (await http.post("/v1/messages", json=anthropic)).status_code == 200
    last = [r.getMessage() for r in caplog.records if "from the cache" in r.message][-1]
    assert last.endswith("in messages[0]"), last  # Anthropic's own index, not the chat one's
