"""The one policy type: how a model's media parts are read, with each modality's
caps (:class:`~.url_reader.UrlRules`), built from its entry once per request.

The caps are the entry's keys: ``max_image_mb`` and ``max_images``, ``max_video_mb``,
``max_videos`` and ``local_video_dirs`` (vision models), ``max_document_mb`` and
``max_document_pages`` (every text model); the fetch rules (``image_fetch_timeout``,
``allow_private_image_urls`` else the server's) are the entry's for every modality.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mlx_gateway.supervisor.config import ModelConfig, ServerConfig
from mlx_gateway.supervisor.config.kinds.embeddings import EmbeddingsConfig
from mlx_gateway.supervisor.config.kinds.vlm import VlmConfig
from mlx_gateway.supervisor.config.text import TextModelConfig
from mlx_gateway.supervisor.engine.media_table import DOCUMENT, IMAGE, VIDEO
from mlx_gateway.supervisor.engine.url_reader import MIB, UrlRules

DEFAULT_FETCH_TIMEOUT = 10.0
"""Seconds for one fetch, for an entry without ``image_fetch_timeout``."""


@dataclass(frozen=True)
class MediaPolicy:
    """How one model's media parts are read."""

    model: str = ""
    rules: dict[str, UrlRules] = field(default_factory=dict)
    """Per modality (:mod:`.media_table`), its URL rules and size cap; a modality
    missing here is one the model does not read from URLs."""
    counts: dict[str, int] = field(default_factory=dict)
    """Per modality, the most parts of one request (``max_images``, ``max_videos``)."""
    max_pages: int = 100
    """``max_document_pages``."""
    render: bool = False
    """A vision model: PDF pages are images too."""
    vision_models: tuple[str, ...] = ()
    """The vision models served (named when a PDF without text goes to a text model)."""

    def of(self, modality: str) -> UrlRules:
        return self.rules[modality]


def media_policy(
    config: ModelConfig,
    server: ServerConfig,
    *,
    render: bool = False,
    vision_models: tuple[str, ...] = (),
) -> MediaPolicy:
    """How the gateway reads the media parts of ``config``'s model (a text, vision
    or embeddings entry; ``render``: a vision model, which sees PDF pages as images)."""
    allow_private = server.allow_private_image_urls
    timeout = DEFAULT_FETCH_TIMEOUT
    if isinstance(config, VlmConfig | EmbeddingsConfig):
        timeout = config.image_fetch_timeout
        if config.allow_private_image_urls is not None:
            allow_private = config.allow_private_image_urls
    rules: dict[str, UrlRules] = {}
    counts: dict[str, int] = {}
    if isinstance(config, VlmConfig | EmbeddingsConfig):
        rules[IMAGE] = UrlRules(
            max_bytes=int(config.max_image_mb * MIB), timeout=timeout, allow_private=allow_private
        )
    if isinstance(config, VlmConfig):
        counts = {IMAGE: config.max_images, VIDEO: config.max_videos}
        rules[VIDEO] = UrlRules(
            noun="video",
            max_bytes=int(config.max_video_mb * MIB),
            size_key="max_video_mb",
            allowed_types=(),
            refused_types=("image/", "audio/", "text/"),
            example_type="video/mp4",
            percent_data=False,
            too_large_status=400,
            url_code="invalid_video_url",
            local_key="local_video_dirs",
            local_dirs=tuple(Path(d).expanduser().resolve() for d in config.local_video_dirs),
            timeout=timeout,
            allow_private=allow_private,
        )
    max_pages = 100
    if isinstance(config, TextModelConfig):
        max_pages = config.max_document_pages
        rules[DOCUMENT] = UrlRules(
            noun="document",
            max_bytes=int(config.max_document_mb * MIB),
            size_key="max_document_mb",
            allowed_types=(),
            example_type="application/pdf",
            percent_data=False,
            too_large_status=400,
            url_code="invalid_document",
            timeout=timeout,
            allow_private=allow_private,
        )
    return MediaPolicy(
        model=config.served_model_name,
        rules=rules,
        counts=counts,
        max_pages=max_pages,
        render=render,
        vision_models=vision_models,
    )
