"""A language-model request's prompt as token ids: the chat template applied to the
messages (tools in the system prompt where the template ignores them), or a raw
prompt as text or token ids."""

from __future__ import annotations

from typing import Any

from mlx_lm.tokenizer_utils import TokenizerWrapper

from mlx_gateway.workers.common import system_turns
from mlx_gateway.workers.common.tool_prompt import ToolPrompt
from mlx_gateway.workers.runtime.contract import RequestError

_TEMPLATE_RESERVED = {
    "conversation",
    "messages",
    "tokenize",
    "add_generation_prompt",
    "return_dict",
}


def flatten_content(message: dict[str, Any]) -> dict[str, Any]:
    """Text parts joined (as mlx-lm's server does); other parts are refused."""
    content = message.get("content")
    if content is None:
        return {**message, "content": ""}
    if not isinstance(content, list):
        return message
    texts = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") != "text":
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise RequestError(
                f"this model accepts only text content, not '{kind}'", param="messages"
            )
        texts.append(str(part.get("text", "")))
    return {**message, "content": "".join(texts)}


def chat_tokens(
    tokenizer: TokenizerWrapper,
    messages: list[dict[str, Any]],
    kwargs: dict[str, Any],
    tool_prompt: ToolPrompt,
) -> list[int]:
    if not tokenizer.has_chat_template:
        raise RequestError(
            "this model has no chat template; use the completions API or set "
            "chat_template_file for it",
            param="messages",
        )
    flat = [flatten_content(m) for m in messages]
    extra = {k: v for k, v in kwargs.items() if k not in _TEMPLATE_RESERVED}
    if tool_prompt.fallback and extra.get("tools"):
        tools = extra.pop("tools")
        flat = tool_prompt.messages(flat, tools if isinstance(tools, list) else [tools])

    def render(conversation: list[dict[str, Any]]) -> str:
        return str(
            tokenizer.apply_chat_template(
                conversation, add_generation_prompt=True, tokenize=False, **extra
            )
        )

    flat = system_turns.for_template(flat, render)
    try:
        tokens = tokenizer.apply_chat_template(flat, add_generation_prompt=True, **extra)
    except Exception as exc:
        # Jinja templates reject conversations with raise_exception(…): a client error.
        raise RequestError(
            f"the chat template rejected the messages: {exc}", param="messages"
        ) from None
    return list(tokens)
