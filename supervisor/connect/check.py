"""``connect --check``: after writing, ask the gateway (with the key the client was
given) about the chosen model, and have it count the client's first request.

It generates nothing: it reads ``GET /v1/models/{id}`` (the model's context length,
and ``prefill_tps``, the prefill speed its worker measured, once it read a prompt),
then sends a request of the client's shape (:mod:`.shape`) to the counting route of
the client's API (``/v1/messages/count_tokens`` for Claude Code,
``/v1/responses/input_tokens`` for Codex), which the worker renders and counts with
the model's own chat template and tokenizer. The verdict: ``TOO LONG`` when the
count plus the room to work exceeds the context, ``TOO SLOW`` when reading it at the
measured speed takes longer than the client waits, else ``OK`` with the numbers.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from mlx_gateway.supervisor.connect.needs import Needs, fits_note, prefill_seconds, slow_note
from mlx_gateway.supervisor.connect.shape import anthropic_request, responses_request
from mlx_gateway.supervisor.connect.target import Target

COUNT_TIMEOUT = 120.0
"""Seconds to wait for a count (the model may have to load first)."""


class CheckFailed(Exception):
    """The gateway could not be asked; the message says what happened."""


def _ask(target: Target, path: str, body: Any = None, timeout: float = 5.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{target.url}{path}", data=data)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if target.key:
        request.add_header("Authorization", f"Bearer {target.key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise CheckFailed(f"{target.url}{path} answered {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise CheckFailed(f"cannot ask {target.url}{path}: {exc}") from None


def count(target: Target, needs: Needs) -> int:
    """The client's first request as ``target.model`` counts it."""
    if needs.api == "anthropic":
        path, body = "/v1/messages/count_tokens", anthropic_request(needs, target.model)
    else:
        path, body = "/v1/responses/input_tokens", responses_request(needs, target.model)
    reply = _ask(target, path, body, timeout=COUNT_TIMEOUT)
    tokens = reply.get("input_tokens") if isinstance(reply, dict) else None
    if not isinstance(tokens, int):
        raise CheckFailed(f"{target.url}{path} answered without input_tokens: {reply!r:.200}")
    return tokens


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    return float(value) if ok else None


def check(target: Target) -> tuple[bool, str]:
    """Whether the client can work with the model, and the line saying so."""
    quoted = urllib.parse.quote(target.model, safe="/")
    try:
        entry = _ask(target, f"/v1/models/{quoted}")
        if not isinstance(entry, dict):
            raise CheckFailed(f"{target.v1}/models/{quoted} answered {entry!r:.200}")
        window = entry.get("context_window")
        rate = _number(entry.get("prefill_tps"))
        needs = target.needs
        if needs is None:
            size = f"context {window:,} tokens" if isinstance(window, int) else "context unknown"
            return True, f"check: OK: {target.model} answers, {size}"
        tokens = count(target, needs)
        if not isinstance(window, int):  # known once the worker ran: the count started it
            window = _ask(target, f"/v1/models/{quoted}").get("context_window")
    except CheckFailed as exc:
        return False, f"check: FAILED: {exc}"
    if not isinstance(window, int):
        window = None
    counted = (
        f"{needs.label}'s first request (as measured on {needs.measured_on}) counts "
        f"{tokens:,} tokens with {target.model}'s tokenizer"
    )
    if (problem := fits_note(target.model, window, needs, tokens)) is not None:
        return False, f"check: TOO LONG: {counted}; {problem}"
    if (slow := slow_note(target.model, rate, needs, tokens)) is not None:
        return False, f"check: TOO SLOW: {counted}; {slow}"
    room = f"{window - tokens:,} to spare of {window:,}" if window else "context not known"
    if rate is None:
        speed = "prefill speed not measured yet (send it a request, then --check again)"
    else:
        seconds = prefill_seconds(tokens, rate)
        speed = (
            f"read in about {seconds:,.0f} s at {rate:,.0f} tokens/s "
            f"({needs.label} waits {needs.watchdog:,.0f} s)"
        )
    return True, f"check: OK: {counted}; {room}; {speed}"
