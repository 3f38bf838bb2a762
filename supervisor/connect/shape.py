"""A coding client's first request, rebuilt from its measured sizes, for
``connect --check`` to have the gateway count with the model's own tokenizer and
chat template (nothing is generated).

The request has the client's shape: a system prompt (instructions) of
:attr:`Needs.system_tokens`, :attr:`Needs.tool_count` tools sharing
:attr:`Needs.tool_tokens` (each a description and a small JSON schema), and the rest
as the user's message. The text is plain English prose (:data:`FILLER`, common
words: one GPT-2 token each), so a model's tokenizer counts it about as it counts
the client's own English prompt; the chat template's own cost of rendering a
system prompt and tools is counted as it will be. The clients' texts themselves
are not shipped: their sizes are (see each client's module).
"""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.connect.needs import Needs

FILLER = (
    "Read the file before you change it, keep the edit small, and run the tests "
    "that cover it; report what changed and why. "
)
FILLER_TOKENS = 27
"""GPT-2 BPE tokens of :data:`FILLER` (24 common words and 3 punctuation marks)."""
SCHEMA_TOKENS = 60
"""GPT-2 tokens of one tool's ``parameters`` schema (:func:`_schema`)."""


def prose(tokens: int) -> str:
    """English prose of about ``tokens`` GPT-2 tokens (at least one sentence)."""
    repeats = max(1, round(tokens / FILLER_TOKENS))
    return (FILLER * repeats).strip()


def _schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "The file to work on."},
            "text": {"type": "string", "description": "What to write there."},
        },
        "required": ["path"],
    }


def _tools(needs: Needs) -> list[tuple[str, str, dict[str, Any]]]:
    """``(name, description, schema)`` of each tool."""
    count = max(needs.tool_count, 1 if needs.tool_tokens else 0)
    if not count:
        return []
    each = max(needs.tool_tokens // count - SCHEMA_TOKENS, FILLER_TOKENS)
    return [(f"tool_{i}", prose(each), _schema()) for i in range(count)]


def _user_tokens(needs: Needs) -> int:
    return max(needs.tokens - needs.system_tokens - needs.tool_tokens, FILLER_TOKENS)


def anthropic_request(needs: Needs, model: str) -> dict[str, Any]:
    """A ``/v1/messages/count_tokens`` body of the client's shape."""
    return {
        "model": model,
        "system": prose(needs.system_tokens),
        "tools": [
            {"name": name, "description": text, "input_schema": schema}
            for name, text, schema in _tools(needs)
        ],
        "messages": [{"role": "user", "content": prose(_user_tokens(needs))}],
    }


def responses_request(needs: Needs, model: str) -> dict[str, Any]:
    """A ``/v1/responses/input_tokens`` body of the client's shape."""
    return {
        "model": model,
        "instructions": prose(needs.system_tokens),
        "tools": [
            {"type": "function", "name": name, "description": text, "parameters": schema}
            for name, text, schema in _tools(needs)
        ],
        "input": [{"role": "user", "content": prose(_user_tokens(needs))}],
    }
