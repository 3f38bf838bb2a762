"""Conversations as the chat templates want them.

Every API turns its input into chat-completions messages (plain dicts); these
last touches make them what chat templates expect: the ``developer`` role is
OpenAI's new name for ``system`` (templates know only the latter), and an earlier
tool call's ``arguments`` are a mapping (Qwen's and Llama's templates iterate over
them or dump them with ``tojson``), not the JSON text the API carries.
"""

from __future__ import annotations

import json
from typing import Any


def for_template(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` ready for a chat template (new dicts; the input is not changed)."""
    out = []
    for message in messages:
        message = dict(message)
        if message.get("role") == "developer":
            message["role"] = "system"
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            message["tool_calls"] = [_call(c) for c in calls]
        out.append(message)
    return out


def _call(call: Any) -> Any:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    function = dict(call["function"])
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            function["arguments"] = parsed
    return {**call, "function": function}
