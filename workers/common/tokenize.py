"""``Tokenize`` and ``Detokenize`` on a Hugging Face tokenizer, for every kind that
has one: token ids of a text, each token's piece of text, the text of token ids."""

from __future__ import annotations

from typing import Any

from mlx_gateway.protocol.messages import Detokenize, Tokenize, Tokens
from mlx_gateway.workers.runtime.contract import RequestError

CONTEXT = 4
"""Tokens decoded before a token to find the text it adds (spaces, word pieces)."""


def hf_tokenizer(loaded: Any) -> Any:
    """The Hugging Face tokenizer inside a library's wrapper (mlx-lm's
    ``TokenizerWrapper``, a processor holding one)."""
    inner = loaded
    for _ in range(2):
        if type(inner).__module__.startswith("transformers"):
            return inner
        inner = getattr(inner, "_tokenizer", None) or getattr(inner, "tokenizer", inner)
    return inner


def text_tokens(tokenizer: Any, request: Tokenize) -> list[int]:
    """The ids of ``request.text`` (``messages`` are the caller's to render)."""
    if request.text is None:
        raise RequestError("content is required", param="content")
    ids = hf_tokenizer(tokenizer).encode(request.text, add_special_tokens=request.add_special)
    return [int(t) for t in ids]


def pieces(tokenizer: Any, ids: list[int]) -> list[str]:
    """Each token's text as it adds to the decoded text (a leading space included);
    a token that ends inside a character adds the replacement character."""
    hf = hf_tokenizer(tokenizer)
    out = []
    for i, token in enumerate(ids):
        before = ids[max(0, i - CONTEXT) : i]
        shown = hf.decode(before) if before else ""
        both = hf.decode([*before, token])
        out.append(both[len(shown) :] if both.startswith(shown) else hf.decode([token]))
    return out


def detokenized(tokenizer: Any, request: Detokenize) -> Tokens:
    hf = hf_tokenizer(tokenizer)
    vocab = len(hf)
    bad = next((t for t in request.tokens if not 0 <= t < vocab), None)
    if bad is not None:
        raise RequestError(
            f"token id {bad} is outside the vocabulary (0..{vocab - 1})", param="tokens"
        )
    return Tokens(request_id=request.request_id, text=hf.decode(request.tokens))


def tokens_reply(tokenizer: Any, request: Tokenize, ids: list[int]) -> Tokens:
    return Tokens(
        request_id=request.request_id,
        tokens=ids,
        pieces=pieces(tokenizer, ids) if request.with_pieces else [],
    )


def answer_tokenize(tokenizer: Any, request: Tokenize | Detokenize) -> Tokens:
    """The answer for a kind without a chat template (``messages`` → 400)."""
    if isinstance(request, Detokenize):
        return detokenized(tokenizer, request)
    if request.messages is not None:
        raise RequestError(
            "this model has no chat template; send 'content' to tokenize", param="messages"
        )
    return tokens_reply(tokenizer, request, text_tokens(tokenizer, request))
