"""A text-to-speech model's worker settings: its voices and ``generate`` arguments.

No I/O and no MLX here: the gateway imports it.
"""

from __future__ import annotations

from typing import Any

from mlx_gateway.supervisor.config.schema import ModelConfig

TTS_KIND = "tts"

OPENAI_VOICES = (
    "alloy",
    "ash",
    "ballad",
    "coral",
    "echo",
    "fable",
    "nova",
    "onyx",
    "sage",
    "shimmer",
    "verse",
    "marin",
    "cedar",
)
"""The voice names of OpenAI's speech API. Clients send one of them by default
(the OpenAI SDK requires a voice), so each is also a name of the model's default
voice unless the model has a voice of that name or the entry's ``voices:`` maps it."""


def voice_aliases(model: ModelConfig) -> dict[str, str | None]:
    """Every alias of ``model``: OpenAI's names (→ the default voice, ``None``) and
    the entry's ``voices:`` mapping, which wins."""
    aliases: dict[str, str | None] = dict.fromkeys(OPENAI_VOICES)
    aliases.update(model.voices)
    return aliases


def worker_options(model: ModelConfig) -> dict[str, Any]:
    """``WorkerSpec.options`` of a tts model's worker (see :mod:`..workers.tts`)."""
    options: dict[str, Any] = {"voice_aliases": voice_aliases(model)}
    if model.voice is not None:
        options["voice"] = model.voice
    if model.generate_kwargs:
        options["generate_kwargs"] = dict(model.generate_kwargs)
    return options
