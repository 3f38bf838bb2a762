"""Rerank models (``model_type: rerank``: cross-encoders on mlx-embeddings, LM
rerankers on mlx-lm): their batching. No I/O and no MLX here."""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.config.entry import ModelConfig, Positive


class RerankConfig(ModelConfig, kw_only=True, tag="rerank"):
    """A rerank model: ``/v1/rerank``."""

    context_length: Positive | None = None
    """Longest query + document in tokens (default: the model's own maximum length)."""
    max_batch_tokens: Positive | None = None
    """Padded tokens per forward pass (``None``: the worker's default, 4096);
    concurrent requests and long document lists share batches up to it."""

    def worker_options(self) -> dict[str, Any]:
        if self.max_batch_tokens is None:
            return {}
        return {"max_batch_tokens": self.max_batch_tokens}


ENTRIES = (RerankConfig,)
"""The Structs of this kind's ``model_type`` values (the kind table's order)."""
