"""What a worker is told at start: the model entry as the worker needs it.

The gateway passes a :class:`WorkerSpec` JSON-encoded on the worker's command line
(``--spec``); the worker never reads the YAML config itself.
"""

from __future__ import annotations

from typing import Any

import msgspec


class WorkerSpec(msgspec.Struct, omit_defaults=True, kw_only=True):
    worker_id: str
    """Also the worker's ZeroMQ identity."""
    kind: str
    """``lm`` (later: ``vlm``, ``embeddings``, ``whisper``, ``image``)."""
    model_path: str
    """A Hugging Face repo id or a local directory."""
    served_model_name: str
    context_length: int | None = None
    chat_template_file: str | None = None
    trust_remote_code: bool = False
    max_concurrency: int = 8
    prefill_batch_size: int = 8
    prefill_step_size: int = 2048
    heartbeat_interval: float = 2.0
    options: dict[str, Any] = {}
    """Kind-specific settings the gateway passes through unchanged."""
    spare: bool = False
    """A spare worker: import the backend of ``kind``, report ``Ready`` with no model
    (``ModelFacts.model_type`` ``"spare"``) and wait for an ``Assign`` naming the
    model to load (``model_path`` is unused)."""


SPAWNED_AT_ENV = "MLX_GATEWAY_SPAWNED_AT"
"""Set by the gateway in a worker's environment: the wall-clock time (seconds since
the epoch) at which it started the process, so the worker's start log can tell how
long the interpreter took to reach it."""


def encode_spec(spec: WorkerSpec) -> str:
    return msgspec.json.encode(spec).decode()


def decode_spec(text: str) -> WorkerSpec:
    return msgspec.json.decode(text, type=WorkerSpec)
