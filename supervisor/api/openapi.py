"""What ``GET /openapi.json`` describes: each surface's own declaration
(``api/<surface>/openapi.py``), gathered here, where every surface may be imported."""

from __future__ import annotations

from mlx_gateway.supervisor.api.audio.openapi import OPENAPI as AUDIO
from mlx_gateway.supervisor.api.chat.openapi import OPENAPI as CHAT
from mlx_gateway.supervisor.api.completions.openapi import OPENAPI as COMPLETIONS
from mlx_gateway.supervisor.api.embeddings.openapi import OPENAPI as EMBEDDINGS
from mlx_gateway.supervisor.api.images.openapi import OPENAPI as IMAGES
from mlx_gateway.supervisor.api.models.openapi import OPENAPI as MODELS
from mlx_gateway.supervisor.api.ollama.openapi import OPENAPI as OLLAMA
from mlx_gateway.supervisor.api.requests.openapi import OPENAPI as REQUESTS
from mlx_gateway.supervisor.api.rerank.openapi import OPENAPI as RERANK
from mlx_gateway.supervisor.api.responses.openapi import OPENAPI as RESPONSES
from mlx_gateway.supervisor.api.speech.openapi import OPENAPI as SPEECH
from mlx_gateway.supervisor.api.tokenize.openapi import OPENAPI as TOKENIZE
from mlx_gateway.supervisor.api.usage.openapi import OPENAPI as USAGE
from mlx_gateway.supervisor.http.openapi import ERROR, OpenApi

DECLARED = OpenApi.gather(
    ERROR,
    CHAT,
    COMPLETIONS,
    RESPONSES,
    EMBEDDINGS,
    TOKENIZE,
    RERANK,
    AUDIO,
    SPEECH,
    IMAGES,
    MODELS,
    REQUESTS,
    USAGE,
    OLLAMA,
)
"""Every surface's operations and hand-written components (the other surfaces, the
Anthropic Messages routes, the Responses store and the web UI among them, appear with
their routes' docstrings)."""
