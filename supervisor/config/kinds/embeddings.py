"""Embeddings models (``model_type: embeddings``, mlx-embeddings): their batching
and what an input too long becomes. No I/O and no MLX here."""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.config.entry import ModelConfig, Positive


class EmbeddingsConfig(ModelConfig, kw_only=True, tag="embeddings"):
    """An embeddings model: ``/v1/embeddings``."""

    context_length: Positive | None = None
    """Longest input in tokens (default: the model's own maximum length)."""
    max_batch_tokens: Positive | None = None
    """Padded tokens per forward pass (``None``: the worker's default, 4096);
    concurrent requests and long input lists share batches up to it."""
    truncate: bool = False
    """Cut inputs longer than the model's maximum length to it, instead of
    answering 400."""

    def worker_options(self) -> dict[str, Any]:
        if self.max_batch_tokens is None:
            return {}
        return {"max_batch_tokens": self.max_batch_tokens}


ENTRIES = (EmbeddingsConfig,)
"""The Structs of this kind's ``model_type`` values (the kind table's order)."""
