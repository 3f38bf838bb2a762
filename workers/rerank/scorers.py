"""Loading a reranker: a cross-encoder (scored here) or an LM reranker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np

from mlx_gateway.protocol.messages import Rerank
from mlx_gateway.protocol.spec import WorkerSpec
from mlx_gateway.workers.common.encoder_limits import max_input_length
from mlx_gateway.workers.common.length_batches import pad_right, pad_values
from mlx_gateway.workers.rerank.cross_encoder import (
    CrossEncoder,
    is_cross_encoder,
    load_cross_encoder,
    scores_of,
)
from mlx_gateway.workers.rerank.lm_reranker import load_lm_reranker
from mlx_gateway.workers.rerank.pairs import CrossPairs, Pair
from mlx_gateway.workers.rerank.scorer import Scorer
from mlx_gateway.workers.runtime.contract import LoadError


class CrossScorer(Scorer):
    family = "cross-encoder"

    def __init__(
        self,
        model: CrossEncoder,
        activation: str,
        tokenizer: Any,
        max_length: int,
        pad_id: int,
        token_types: int,
    ) -> None:
        self.model = model
        self.token_types = token_types
        self.activation = activation
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.pad_id = pad_id
        self.pairs = CrossPairs(tokenizer, max_length)
        self.facts = {"activation": activation}

    def rows(self, request: Rerank) -> list[list[Pair]]:
        return self.pairs.rows(
            request.query,
            request.documents,
            request.max_tokens_per_doc,
            request.max_chunks_per_doc,
        )

    def score(self, pairs: list[Pair]) -> np.ndarray:
        ids, mask = pad_right([p.ids for p in pairs], self.pad_id)
        types = pad_values([p.type_ids for p in pairs])
        if self.token_types <= 1:  # RoBERTa: one token type, whatever the template says
            types[:] = 0
        logits = self.model(mx.array(ids), mx.array(mask), mx.array(types))
        return np.array(scores_of(logits, self.activation), dtype=np.float64)


def load_scorer(path: Path, config: dict[str, Any], spec: WorkerSpec) -> Scorer:
    """The reranker in ``path``: a cross-encoder, or an LM reranker."""
    if is_cross_encoder(config):
        from transformers import AutoTokenizer

        model, activation = load_cross_encoder(path, config)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path))
        except Exception as exc:
            raise LoadError(f"the tokenizer in {path} does not load: {exc}") from None
        pad_id = tokenizer.pad_token_id
        if pad_id is None:
            pad_id = int(config.get("pad_token_id") or 0)
        limit = max_input_length(path, config, tokenizer, spec.context_length)
        types = config.get("type_vocab_size")
        token_types = int(types) if isinstance(types, int) else 2
        return CrossScorer(model, activation, tokenizer, limit, int(pad_id), token_types)
    return load_lm_reranker(path, config, spec)
