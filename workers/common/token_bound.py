"""A cheap lower bound on a text's tokens, so that an input that cannot fit is
refused before it is tokenized whole.

Tokenizing a 10 MiB prompt takes a fast tokenizer 12-15 s of the worker's one MLX
thread (every other request to the model waits) only to answer 400. No token of a
vocabulary stands for more characters than its longest entry (a byte-level entry
has one character per byte, a SentencePiece or WordPiece entry at least as many
as the text it stands for), so a text has at least ``visible / longest`` tokens.
Whitespace is left out (a normalizer may drop it) and the bound is halved again
(:data:`SLACK`: a normalizer may fold combining marks into their letters), so it
never refuses a text that would fit; counting costs one pass over the text.

Where a long input is cut rather than refused (rerank documents), the same bound
gives :meth:`TokenBound.prefix`: the start of the text that surely holds the tokens
that will be read, so the rest is never tokenized.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any

from mlx_gateway.protocol.messages import ContextOverflow
from mlx_gateway.workers.common.tokenize import hf_tokenizer
from mlx_gateway.workers.runtime.contract import RequestError

log = logging.getLogger(__name__)

SLACK = 2
"""The bound divides by this much more than the longest entry."""
MARGIN = 64
"""Tokens a :meth:`TokenBound.prefix` keeps beyond those asked for, so that where the
cut falls (maybe inside a word) changes no token that is read."""
_WORDS = re.compile(r"\S+")


class TokenBound:
    """``at_least(texts)``: tokens the texts hold at least (0: no bound known)."""

    def __init__(self, longest: int | None) -> None:
        self.longest = longest

    @classmethod
    def of(cls, tokenizer: Any) -> TokenBound:
        """From the tokenizer's vocabulary (no bound when it cannot be read)."""
        try:
            vocab = hf_tokenizer(tokenizer).get_vocab()
            longest = max((len(entry) for entry in vocab), default=0)
        except Exception:  # a tokenizer without get_vocab (tiktoken, a custom one)
            log.debug("no vocabulary to bound prompts by", exc_info=True)
            return cls(None)
        return cls(longest or None)

    def at_least(self, texts: Iterable[str]) -> int:
        if not self.longest:
            return 0
        per_token = self.longest * SLACK
        total = 0
        for text in texts:
            if len(text) > per_token:
                total += len("".join(text.split())) // per_token
        return total

    def prefix(self, text: str, tokens: int) -> str:
        """``text`` cut where it surely holds ``tokens`` (and :data:`MARGIN` more)
        tokens, or whole: the first ``tokens`` tokens of the cut text are the whole
        text's, found without tokenizing the rest."""
        if not self.longest:
            return text
        need = (tokens + MARGIN) * self.longest * SLACK  # visible characters
        if len(text) <= need:
            return text
        seen = 0
        for word in _WORDS.finditer(text):
            size = word.end() - word.start()
            if seen + size >= need:
                return text[: word.start() + need - seen]
            seen += size
        return text

    def reason(self, chars: int) -> str:
        """Why the bound holds, for an error message."""
        return (
            f"{chars} characters, and no token of this model stands for more than "
            f"{self.longest} characters"
        )


PROMPT_ROLES = frozenset({"system", "developer", "user", "tool"})
"""Roles whose text every chat template renders whole (an assistant turn's
reasoning may be left out)."""


def chat_texts(messages: Iterable[dict[str, Any]]) -> Iterable[str]:
    """The texts of the messages a chat template renders whole."""
    for message in messages:
        if message.get("role") not in PROMPT_ROLES:
            continue
        content = message.get("content")
        if isinstance(content, str):
            yield content
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    yield part["text"]


def refuse_unfittable(
    bound: TokenBound,
    limit: int | None,
    messages: list[dict[str, Any]] | None,
    prompt: str | list[int] | None,
    max_tokens: int | None = None,
) -> None:
    """Raise OpenAI's 400 ``context_length_exceeded`` for a chat (``messages``) or
    text ``prompt`` that the bound shows cannot fit ``limit`` tokens, before it is
    tokenized whole; nothing for one that may fit (its exact count decides)."""
    if limit is None:
        return
    if messages is not None:
        texts, where = list(chat_texts(messages)), "messages"
    elif isinstance(prompt, str):
        texts, where = [prompt], "prompt"
    else:
        return
    tokens = bound.at_least(texts)
    if tokens < limit:
        return
    reason = bound.reason(sum(map(len, texts)))
    raise RequestError(
        f"This model's maximum context length is {limit} tokens. However, your "
        f"{where} hold at least {tokens} tokens ({reason}). Please reduce the length "
        f"of the {where}.",
        param=where,
        code="context_length_exceeded",
        overflow=ContextOverflow(tokens, max_tokens, limit),
    )
