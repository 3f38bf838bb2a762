"""A language-model request's prompt as token ids: the chat template applied to the
messages (tools in the system prompt where the template ignores them), or a raw
prompt as text or token ids."""

from __future__ import annotations

from array import array
from collections import OrderedDict
from typing import Any

from mlx_lm.tokenizer_utils import TokenizerWrapper

from mlx_gateway.protocol.messages import Generate
from mlx_gateway.workers.common import system_turns
from mlx_gateway.workers.common.tool_prompt import ToolPrompt
from mlx_gateway.workers.lm.prompt_cache import common_prefix
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


def _prepared(
    tokenizer: TokenizerWrapper,
    messages: list[dict[str, Any]],
    kwargs: dict[str, Any],
    tool_prompt: ToolPrompt,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The messages as the template reads them, and the template's keyword arguments."""
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

    return system_turns.for_template(flat, render), extra


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
    flat, extra = _prepared(tokenizer, messages, kwargs, tool_prompt)
    try:
        tokens = tokenizer.apply_chat_template(flat, add_generation_prompt=True, **extra)
    except Exception as exc:
        # Jinja templates reject conversations with raise_exception(…): a client error.
        raise RequestError(
            f"the chat template rejected the messages: {exc}", param="messages"
        ) from None
    return list(tokens)


def prompt_tokens(
    tokenizer: TokenizerWrapper, request: Generate, tool_prompt: ToolPrompt
) -> tuple[list[int], str]:
    """The prompt of ``request`` as token ids, and the field it came from (for error
    params)."""
    if request.messages is not None:
        tokens = chat_tokens(tokenizer, request.messages, request.chat_template_kwargs, tool_prompt)
        where = "messages"
    elif isinstance(request.prompt, str):
        bos = tokenizer.bos_token
        add_special = bos is None or not request.prompt.startswith(bos)
        tokens = tokenizer.encode(request.prompt, add_special_tokens=add_special)
        where = "prompt"
    elif isinstance(request.prompt, list):
        vocab = len(tokenizer)
        bad = next((t for t in request.prompt if not 0 <= t < vocab), None)
        if bad is not None:
            raise RequestError(
                f"token id {bad} in the prompt is outside the vocabulary (0..{vocab - 1})",
                param="prompt",
            )
        tokens = list(request.prompt)
        where = "prompt"
    else:
        raise RequestError("either messages or prompt is required", param="messages")
    if not tokens:
        raise RequestError(f"the {where} is empty", param=where)
    return tokens, where


class SystemEnds:
    """Where the first user turn of a chat prompt starts: the end of its system
    prompt and tools (what every conversation with them shares).

    Found from the chat template itself: the leading system messages followed by
    an empty user turn are rendered, and the point where those tokens leave the
    prompt's is the end (inside the user turn's header, which is shared too).
    The rendered openings' tokens are kept for the last few system prompts, so an
    agent's long system prompt is tokenized once, not at every turn."""

    def __init__(self, keep: int = 8) -> None:
        self._keep = keep
        self._tokens: OrderedDict[str, bytes] = OrderedDict()

    def find(
        self,
        tokenizer: TokenizerWrapper,
        messages: list[dict[str, Any]],
        kwargs: dict[str, Any],
        tool_prompt: ToolPrompt,
        prompt: list[int],
    ) -> int:
        """The end of the leading part of ``prompt`` (0 when the template gives none)."""
        try:
            flat, extra = _prepared(tokenizer, messages, kwargs, tool_prompt)
            leading = []
            for message in flat:
                if message.get("role") not in ("system", "developer"):
                    break
                leading.append(message)
            opening = [*leading, {"role": "user", "content": ""}]
            text = str(
                tokenizer.apply_chat_template(
                    opening, add_generation_prompt=False, tokenize=False, **extra
                )
            )
            tokens = self._tokens.get(text)
            if tokens is None:
                ids = tokenizer.apply_chat_template(opening, add_generation_prompt=False, **extra)
                tokens = array("I", list(ids)).tobytes()
                self._tokens[text] = tokens
                while len(self._tokens) > self._keep:
                    self._tokens.popitem(last=False)
            else:
                self._tokens.move_to_end(text)
        except Exception:  # a template that refuses an empty user turn: no boundary
            return 0
        shared = common_prefix(tokens, array("I", prompt).tobytes())
        return shared if shared < len(prompt) else 0
