"""What a model's handle reports of itself: a typed record, and the JSON that
``/v1/models`` and ``/health`` show of it (:meth:`ModelStatus.public`)."""

from __future__ import annotations

from typing import Any

import msgspec


class LoadProgress(msgspec.Struct):
    """How far a load got: ``stage`` (download, load…), a ``fraction`` when known."""

    stage: str
    fraction: float | None = None
    detail: str | None = None


class ModelStatus(msgspec.Struct, kw_only=True):
    state: str
    """``unloaded``, ``loading``, ``ready``, ``stopping`` or ``failed``."""
    pid: int | None = None
    inflight: int = 0
    waiting: int = 0
    last_used: float | None = None
    """Unix time at which its last request ended."""
    error: str | None = None
    context_length: int | None = None
    memory: int | None = None
    """Resident bytes of its worker (ready only)."""
    memory_detail: dict[str, Any] | None = None
    memory_need: int | None = None
    memory_need_source: str = "unknown"
    memory_need_parts: dict[str, int] | None = None
    load_progress: LoadProgress | None = None
    pinned: bool = False
    draining: bool = False
    step: str | None = None
    """The step its worker runs now (``decode of 2 requests``) and how long it has
    made no progress, as of the last heartbeat; ``None`` between steps."""
    crashes: int = 0
    stalls: int = 0
    """Workers killed for a step stuck past ``step_timeout``."""
    evictions: int = 0
    prefill_tps: float | None = None
    """Prompt tokens per second its worker measured reading long prompts (language
    models; ``None`` until one was read)."""
    blas: str | None = None
    tool_prompt: str | None = None
    draft_model: str | None = None
    voices: list[str] | None = None
    """Text-to-speech models: the voice names requests may give (once loaded)."""
    sample_rate: int | None = None
    """Text-to-speech models: the model's sample rate (once loaded)."""

    def public(self) -> dict[str, Any]:
        """The JSON object of this status (every field, ``null`` where unknown)."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


def facts_fields(extra: dict[str, str]) -> dict[str, Any]:
    """The status fields a worker's ``Ready.facts.extra`` fills in."""
    voices, rate = extra.get("voices"), extra.get("sample_rate")
    return {
        "blas": extra.get("blas"),
        "tool_prompt": extra.get("tool_prompt"),
        "draft_model": extra.get("draft_model"),
        "voices": voices.split(",") if voices else None,
        "sample_rate": int(rate) if rate else None,
    }
