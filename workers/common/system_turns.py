"""System messages after the first message, for chat templates that refuse them.

A conversation may carry ``system`` messages past its start (OpenAI's chat API
allows them anywhere; the Anthropic API with its ``mid-conversation-system`` beta).
Many chat templates render any role as a turn of its own; others raise
(``raise_exception('System message must be at the beginning')``) or silently drop
them. :func:`for_template` keeps them as system turns where the template renders
their text, and otherwise adds their text, in order, to the first system message
(made if there is none), so the model still reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _late_system(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in messages[1:] if m.get("role") == "system"]


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def merged(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with every system message's text in one leading system message."""
    texts = [_text(m) for m in messages if m.get("role") == "system"]
    rest = [m for m in messages if m.get("role") != "system"]
    text = "\n\n".join(t for t in texts if t)
    return [{"role": "system", "content": text}, *rest]


def for_template(
    messages: list[dict[str, Any]], render: Callable[[list[dict[str, Any]]], str]
) -> list[dict[str, Any]]:
    """``messages`` as the template behind ``render`` (messages → prompt text) takes
    them: unchanged without late system messages or when it renders their text,
    else :func:`merged`."""
    late = _late_system(messages)
    if not late:
        return messages
    try:
        text = render(messages)
    except Exception:  # a template's raise_exception(…), or any failure to render
        return merged(messages)
    if all(_text(m).strip() in text for m in late):
        return messages
    return merged(messages)
