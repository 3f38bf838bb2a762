"""LM rerankers (``Qwen/Qwen3-Reranker-*`` and models trained the same way), on mlx-lm.

The model reads the prompt its model card documents — a system turn asking for a
"yes" or "no" judgement, then ``<Instruct>``, ``<Query>`` and ``<Document>`` lines,
then an assistant turn with an empty thinking block — and the relevance is the
probability of its next token being "yes" rather than "no":
``exp(l_yes) / (exp(l_yes) + exp(l_no))`` from the logits after the last token.

Rows are padded on the right: attention is causal, so a row's tokens never see its
padding, and only the logits at each row's last real token are computed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
import numpy as np
from mlx_lm import load as load_model_and_tokenizer

from mlx_gateway.protocol.messages import Rerank
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.common.length_batches import pad_right
from mlx_gateway.workers.common.token_bound import TokenBound
from mlx_gateway.workers.common.tokenize import hf_tokenizer
from mlx_gateway.workers.rerank.pairs import Pair, reach, rust_tokenizer, windows
from mlx_gateway.workers.rerank.scorer import Scorer
from mlx_gateway.workers.runtime.contract import LoadError

log = logging.getLogger(__name__)

SYSTEM = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on "
    'the Query and the Instruct provided. Note that the answer can only be "yes" or '
    '"no".<|im_end|>\n<|im_start|>user\n'
)
ASSISTANT = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
"""The task the model is told when a request names none (its model card's default)."""
MAX_WINDOW = 8192
"""The longest row when neither the entry nor the model says less."""


def prompt_text(instruction: str, query: str, document: str) -> str:
    """The whole prompt of one pair, as text (what a row decodes to, uncut)."""
    return f"{SYSTEM}<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}{ASSISTANT}"


def _answer_id(tokenizer: Any, word: str) -> int:
    ids = tokenizer.encode(word, add_special_tokens=False)
    if len(ids) != 1:
        raise LoadError(
            f"an LM reranker needs '{word}' as one token of its vocabulary; this tokenizer "
            f"makes {len(ids)} of it"
        )
    return int(ids[0])


class LmScorer(Scorer):
    family = "lm"

    def __init__(self, model: Any, tokenizer: Any, max_length: int) -> None:
        self.model = model
        self.tokenizer = hf_tokenizer(tokenizer)
        self.backend = rust_tokenizer(tokenizer)
        self.bound = TokenBound.of(self.tokenizer)
        """Cuts a text far longer than a row reads before it is tokenized."""
        self.max_length = max_length
        self.yes = _answer_id(self.tokenizer, "yes")
        self.no = _answer_id(self.tokenizer, "no")
        pad = self.tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else self.tokenizer.eos_token_id or 0)
        self.facts = {"yes_token": str(self.yes), "no_token": str(self.no)}

    def _ids(self, text: str) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def rows(self, request: Rerank) -> list[list[Pair]]:
        """As the model card does it: the system turn, the ``<Instruct>``/``<Query>``/
        ``<Document>`` text and the assistant turn tokenized apart and joined, the
        middle one cut at its end when the whole is too long. With
        ``max_tokens_per_doc`` or windows the document is tokenized on its own."""
        system, assistant = self._ids(SYSTEM), self._ids(ASSISTANT)
        room = max(self.max_length - len(system) - len(assistant), 2)
        instruction = self.bound.prefix(request.instruction or DEFAULT_INSTRUCTION, room)
        query_text = self.bound.prefix(request.query, room)
        if request.max_chunks_per_doc <= 1 and request.max_tokens_per_doc is None:
            out = []
            for doc in request.documents:
                doc = self.bound.prefix(doc, room)
                body = self._ids(
                    f"<Instruct>: {instruction}\n<Query>: {query_text}\n<Document>: {doc}"
                )
                out.append([Pair([*system, *body[:room], *assistant], [])])
            return out
        head = self._ids(f"<Instruct>: {instruction}\n<Query>: ")
        query = self._ids(query_text)
        middle = self._ids("\n<Document>: ")
        # the query keeps at most half of what the fixed parts leave
        left = max(room - len(head) - len(middle), 2)
        query = query[: left // 2]
        budget = max(left - len(query), 1)
        if request.max_tokens_per_doc is not None:
            budget = max(min(budget, request.max_tokens_per_doc), 1)
        lead = [*system, *head, *query, *middle]
        return [
            [
                Pair([*lead, *window.ids, *assistant], [])
                for window in windows(
                    self.backend,
                    self.bound.prefix(doc, reach(budget, request.max_chunks_per_doc)),
                    budget,
                    request.max_chunks_per_doc,
                )
            ]
            for doc in request.documents
        ]

    def score(self, pairs: list[Pair]) -> np.ndarray:
        ids, _ = pad_right([p.ids for p in pairs], self.pad_id)
        hidden = self.model.model(mx.array(ids))
        last = mx.array([p.length - 1 for p in pairs])
        states = hidden[mx.arange(len(pairs)), last]
        head = getattr(self.model, "lm_head", None)
        logits = (
            head(states) if head is not None else self.model.model.embed_tokens.as_linear(states)
        )
        pair = mx.stack([logits[:, self.no], logits[:, self.yes]], axis=-1).astype(mx.float32)
        return np.array(mx.softmax(pair, axis=-1)[:, 1], dtype=np.float64)


def load_lm_reranker(path: Path, config: dict[str, Any], spec: WorkerSpec) -> LmScorer:
    try:
        model, tokenizer = cast(tuple[Any, Any], load_model_and_tokenizer(str(path)))
    except ValueError as exc:  # "Model type … not supported"
        raise LoadError(
            f"load failed: {spec.model_path}: {exc} (a rerank model is a cross-encoder "
            "(…ForSequenceClassification) or a causal LM reranker such as Qwen3-Reranker)"
        ) from None
    positions = config.get("max_position_embeddings")
    limit = spec.context_length or (
        min(positions, MAX_WINDOW) if isinstance(positions, int) and positions > 0 else MAX_WINDOW
    )
    return LmScorer(model, tokenizer, limit)
