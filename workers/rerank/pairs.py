"""Query/document pairs as model rows: truncation to the window, or windows.

A pair must fit the model's window (its maximum length). The query is cut to at
most half of it, so a document always gets the other half; a document longer than
what is left is cut to fit (``max_tokens_per_doc`` cuts it shorter still) or, with
``max_chunks_per_doc`` above 1, read in up to that many overlapping windows (a
quarter of a window overlaps the next), each a row of its own: the document then
scores by its best window. Never an error.

Token ids come from the Hugging Face *fast* tokenizer's Rust backend (the
``tokenizers`` library), which cuts an encoding into windows itself and adds the
special tokens of a pair (``[CLS] q [SEP] d [SEP]``, with its token type ids).

A text far longer than what its rows read (a 10 MiB document) is cut first to what
surely holds those tokens (:meth:`~..common.token_bound.TokenBound.prefix`), so its
unread rest costs no tokenizing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mlx_gateway.workers.common.token_bound import TokenBound
from mlx_gateway.workers.runtime.contract import LoadError, RequestError

OVERLAP = 4
"""A window overlaps the next by 1/OVERLAP of its length."""


@dataclass(frozen=True)
class Pair:
    """One row of a forward pass: a window of one document."""

    ids: list[int]
    type_ids: list[int]

    @property
    def length(self) -> int:
        return len(self.ids)


def rust_tokenizer(tokenizer: Any) -> Any:
    """The ``tokenizers.Tokenizer`` inside a Hugging Face (or mlx-lm) tokenizer."""
    for candidate in (tokenizer, getattr(tokenizer, "_tokenizer", None)):
        backend = getattr(candidate, "backend_tokenizer", None)
        if backend is not None:
            return backend
    backend = getattr(tokenizer, "_tokenizer", None)
    if not hasattr(backend, "post_process"):
        raise LoadError(
            "the model's tokenizer has no fast (tokenizers) backend; rerank needs one "
            "(a tokenizer.json)"
        )
    return backend


def reach(budget: int, max_chunks: int) -> int:
    """The tokens of a document that its windows read at most."""
    if max_chunks <= 1:
        return budget
    return budget + (max_chunks - 1) * (budget - budget // OVERLAP)


def windows(backend: Any, text: str, budget: int, max_chunks: int) -> list[Any]:
    """``text``'s encoding (no special tokens) in windows of at most ``budget`` tokens:
    one, cut, unless ``max_chunks`` allows more."""
    encoding = backend.encode(text, add_special_tokens=False)
    if len(encoding.ids) <= budget:
        return [encoding]
    if max_chunks <= 1:
        encoding.truncate(budget)
        return [encoding]
    encoding.truncate(budget, stride=budget // OVERLAP)
    return [encoding, *encoding.overflowing][:max_chunks]


def check_documents(query: str, documents: list[str]) -> None:
    """The worker's own checks (the gateway checks these first)."""
    if not query:
        raise RequestError("the query is empty", param="query")
    if not documents:
        raise RequestError("documents is empty; send at least one", param="documents")
    for i, doc in enumerate(documents):
        if not doc:
            raise RequestError(f"documents[{i}] is empty", param=f"documents[{i}]")


class CrossPairs:
    """Pairs for a cross-encoder: the tokenizer's own pair template."""

    def __init__(self, tokenizer: Any, max_length: int) -> None:
        self.backend = rust_tokenizer(tokenizer)
        self.bound = TokenBound.of(tokenizer)
        self.max_length = max_length
        self.specials = int(self.backend.num_special_tokens_to_add(True))
        if max_length < self.specials + 2:
            raise LoadError(f"the model's maximum length {max_length} is too short for a pair")

    def rows(
        self,
        query: str,
        documents: list[str],
        max_tokens_per_doc: int | None,
        max_chunks: int,
    ) -> list[list[Pair]]:
        """Per document, its rows (one, or its windows)."""
        room = self.max_length - self.specials
        q = self.backend.encode(self.bound.prefix(query, room // 2), add_special_tokens=False)
        if len(q.ids) > room // 2:
            q.truncate(room // 2)
        budget = max(room - len(q.ids), 1)
        if max_tokens_per_doc is not None:
            budget = max(min(budget, max_tokens_per_doc), 1)
        out = []
        for doc in documents:
            pairs = []
            read = self.bound.prefix(doc, reach(budget, max_chunks))
            for window in windows(self.backend, read, budget, max_chunks):
                both = self.backend.post_process(q, window, add_special_tokens=True)
                pairs.append(Pair(list(both.ids), list(both.type_ids)))
            out.append(pairs)
        return out
