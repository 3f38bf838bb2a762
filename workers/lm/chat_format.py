"""What a language model's chat format tells the gateway about its output.

The gateway parses tool calls and thinking blocks out of the text stream, but it
never sees the tokenizer or the chat template. The worker reports, once in
``Ready.facts.extra``:

* ``tool_parser``: the tool-call format mlx-lm inferred from the chat template or
  the vocabulary (its ``tool_parser_type``: ``json_tools``, ``qwen3_coder``,
  ``gemma4``, ``function_gemma``, ``mistral``, ``pythonic``, …), or ``llama3_json``
  for Llama 3.1+ templates, which mlx-lm does not name, or ``harmony`` for
  gpt-oss's (channels), which it does not know;
* ``think_start`` / ``think_end``: the thinking-block markers mlx-lm found in the
  vocabulary (``<think>``/``</think>`` and the variants of other families);

* ``reasoning_parser``: ``harmony`` for a gpt-oss template (its analysis channel
  is the reasoning);

and per request (``Started.reasoning``) whether the rendered prompt ends inside an
open thinking block, as templates with thinking enabled by default do.
"""

from __future__ import annotations

from typing import Any


def template_facts(tokenizer: Any) -> dict[str, str]:
    """The ``ModelFacts.extra`` entries of a mlx-lm ``TokenizerWrapper``."""
    facts: dict[str, str] = {}
    hf = getattr(tokenizer, "_tokenizer", tokenizer)
    parser = (getattr(hf, "init_kwargs", None) or {}).get("tool_parser_type")
    template = getattr(hf, "chat_template", None)
    if not parser and isinstance(template, str) and _is_llama3_tools(template):
        parser = "llama3_json"
    if not parser and isinstance(template, str) and _is_harmony(template):
        parser = facts["reasoning_parser"] = "harmony"
    if isinstance(parser, str) and parser:
        facts["tool_parser"] = parser
    start = getattr(tokenizer, "think_start", None)
    end = getattr(tokenizer, "think_end", None)
    if isinstance(start, str) and isinstance(end, str) and start and end:
        facts["think_start"], facts["think_end"] = start, end
    return facts


def _is_llama3_tools(template: str) -> bool:
    # Llama 3.1/3.2/3.3 templates render calls as {"name": …, "parameters": …} after
    # the <|python_tag|> or in a plain assistant turn.
    return "<|start_header_id|>" in template and (
        "<|python_tag|>" in template or '"parameters"' in template
    )


def _is_harmony(template: str) -> bool:
    # gpt-oss: every message is <|start|>role<|channel|>name<|message|>text.
    return "<|channel|>" in template and "<|message|>" in template


def opens_thinking(tokenizer: Any, prompt: list[int]) -> bool:
    """Whether ``prompt`` ends inside a thinking block: its last thinking-start
    marker comes after its last thinking-end marker."""
    if not getattr(tokenizer, "has_thinking", False):
        return False
    try:
        start = tokenizer.rfind_think_start(prompt)
        end = tokenizer.rfind_think_end(prompt)
    except (TypeError, ValueError, IndexError):
        return False
    return start >= 0 and start > end
