"""Tools for a model whose chat template ignores them.

Many small and older models' chat templates never look at ``tools``: the
definitions a client sends would vanish from the prompt without a word (the model
then cannot call anything). At load, :func:`probe_tool_prompt` renders a probe
conversation with and without one tool; when both come out the same (or the
template fails with tools), the worker describes the tools itself, in a section
of the system prompt (:data:`TOOL_SECTION`), and asks for calls in the Hermes
format, which the gateway parses and its grammar forces::

    <tool_call>
    {"name": "<function name>", "arguments": {<the arguments as a JSON object>}}
    </tool_call>

Such a template ignores a conversation's earlier calls and their results as well:
an assistant message's ``tool_calls`` are written into its text in the same
format, and ``tool`` messages become a user turn holding each result between
``<tool_response>`` and ``</tool_response>``. A template without a system role
(one that fails on it or drops it) gets the section at the top of the first user
message instead.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

TOOL_SECTION = """\
# Tools

You can call the functions listed below between <tools> and </tools>, one JSON schema a line:
<tools>
{tools}
</tools>

To call a function, answer with its name and arguments as a JSON object between <tool_call>
and </tool_call>, like this:
<tool_call>
{{"name": "<function name>", "arguments": {{<the arguments as a JSON object>}}}}
</tool_call>
Write one such block per call. Each result comes back between <tool_response> and
</tool_response>."""
"""The system-prompt section that describes the tools (``{tools}``: one JSON line
per tool, in the chat-completions shape the client sent)."""

TEMPLATE = "template"
"""``ModelFacts.extra["tool_prompt"]``: the chat template renders the tools."""
FALLBACK = "fallback"
"""``ModelFacts.extra["tool_prompt"]``: the worker writes :data:`TOOL_SECTION`."""

_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "probe_lookup",
        "description": "Looks a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    },
}
_PROBE_USER = {"role": "user", "content": "Look up the word 'gateway'."}
_PROBE_SYSTEM = "Probe instructions 7f3c."


@dataclass(frozen=True)
class ToolPrompt:
    """How one model's prompts carry tools (see the module docstring)."""

    fallback: bool = False
    """The template ignores tools: the worker describes them."""
    system_role: bool = True
    """The template renders a system message (else the section opens the first
    user message)."""

    @property
    def fact(self) -> str:
        return FALLBACK if self.fallback else TEMPLATE

    def messages(
        self, messages: list[dict[str, Any]], tools: list[Any] | None
    ) -> list[dict[str, Any]]:
        """``messages`` with the tools, earlier calls and their results written
        out; unchanged when the template renders tools itself or there are none."""
        if not self.fallback or not tools:
            return messages
        out = _history(messages)
        section = TOOL_SECTION.format(
            tools="\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        )
        first = out[0] if out else None
        if first is not None and first.get("role") == "system":
            out[0] = {**first, "content": _joined(first.get("content"), section)}
        elif self.system_role:
            out.insert(0, {"role": "system", "content": section})
        else:
            at = next((i for i, m in enumerate(out) if m.get("role") == "user"), None)
            if at is None:
                out.insert(0, {"role": "user", "content": section})
            else:
                out[at] = {**out[at], "content": _joined(section, out[at].get("content"))}
        return out


Render = Callable[..., str]
"""The chat template applied to ``messages`` (with the generation prompt), extra
template variables as keywords."""


def probe_tool_prompt(render: Render, name: str) -> ToolPrompt:
    """Find out once, at load, whether the chat template renders tools; logs the
    path the model takes."""
    try:
        plain = render([_PROBE_USER])
    except Exception as exc:  # templates raise anything; then leave them alone
        log.info("%s: the chat template failed on a probe conversation (%s)", name, exc)
        return ToolPrompt()
    try:
        ignores = render([_PROBE_USER], tools=[_PROBE_TOOL]) == plain
    except Exception:
        ignores = True  # it fails when given tools: it cannot take them
    if not ignores:
        log.info("%s: its chat template renders the tools", name)
        return ToolPrompt()
    try:
        system_role = _PROBE_SYSTEM in render(
            [{"role": "system", "content": _PROBE_SYSTEM}, _PROBE_USER]
        )
    except Exception:
        system_role = False
    log.info(
        "%s: its chat template ignores tools; they go into the %s as the fallback "
        "tool section (calls in <tool_call> tags)",
        name,
        "system prompt" if system_role else "first user message",
    )
    return ToolPrompt(fallback=True, system_role=system_role)


def _joined(first: Any, second: Any) -> Any:
    """Two contents one after the other, a blank line between; a list of content
    parts (vision models) stays a list, the text joining it as a part of its own."""
    if not isinstance(first, list) and not isinstance(second, list):
        return "\n\n".join(str(c) for c in (first, second) if c)
    if isinstance(first, list) and isinstance(second, list):
        return [*first, *second]
    if isinstance(first, list):
        return [*first, {"type": "text", "text": f"\n\n{second}"}] if second else first
    return [{"type": "text", "text": f"{first}\n\n"}, *second] if first else second


def _call_text(call: Any) -> str:
    function = call.get("function", call) if isinstance(call, dict) else {}
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):
            arguments = json.loads(arguments)
    body: dict[str, Any] = {
        "name": function.get("name"),
        "arguments": {} if arguments is None else arguments,
    }
    return f"<tool_call>\n{json.dumps(body, ensure_ascii=False)}\n</tool_call>"


def _text_of(content: Any) -> str:
    if isinstance(content, list):  # content parts: their text
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _history(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Earlier calls into the assistant's text; runs of tool results into one user turn."""
    out: list[dict[str, Any]] = []
    results: list[str] = []

    def flush() -> None:
        if results:
            out.append({"role": "user", "content": "\n".join(results)})
            results.clear()

    for message in messages:
        role = message.get("role")
        if role == "tool":
            result = _text_of(message.get("content"))
            results.append(f"<tool_response>\n{result}\n</tool_response>")
            continue
        flush()
        calls = message.get("tool_calls")
        if role == "assistant" and calls:
            text = "\n".join(_call_text(c) for c in calls)
            message = {k: v for k, v in message.items() if k != "tool_calls"}
            message["content"] = _joined(message.get("content"), text)
        out.append(message)
    flush()
    return out
