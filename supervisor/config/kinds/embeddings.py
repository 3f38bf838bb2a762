"""Embeddings models (``model_type: embeddings``, mlx-embeddings): their batching,
what an input too long becomes, and how image inputs are read (image-embedding
models). No I/O and no MLX here."""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.config.entry import ModelConfig, Positive, PositiveMiB, PositiveSeconds


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
    max_image_mb: PositiveMiB = 20.0
    """Image-embedding models: largest image input (a ``data:`` URL's bytes or a
    fetched file), in MiB → else 413."""
    image_fetch_timeout: PositiveSeconds = 10.0
    """Seconds the gateway may spend fetching one http(s) image input."""
    allow_private_image_urls: bool | None = None
    """Overrides ``server.allow_private_image_urls`` for this model's image inputs."""

    def worker_options(self) -> dict[str, Any]:
        if self.max_batch_tokens is None:
            return {}
        return {"max_batch_tokens": self.max_batch_tokens}


ENTRIES = (EmbeddingsConfig,)
"""The Structs of this kind's ``model_type`` values (the kind table's order)."""
