"""Text-to-speech models (``model_type: tts``, mlx-audio): their voices and
``generate`` arguments.

No I/O and no MLX here: the gateway imports it.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from mlx_gateway.supervisor.config.entry import ModelConfig, Positive

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


class TtsConfig(ModelConfig, kw_only=True, tag="tts"):
    """A text-to-speech model: ``/v1/audio/speech`` (and Wyoming's synthesis)."""

    max_input_chars: Positive = 4096
    """Longest ``input`` accepted, in characters → else 400."""
    voice: Annotated[str, msgspec.Meta(min_length=1)] | None = None
    """The voice of requests that name ``default`` (or an OpenAI voice the model
    lacks); ``None``: the model's own default."""
    voices: dict[str, Annotated[str, msgspec.Meta(min_length=1)]] = {}
    """More names for the model's voices (``alloy: af_heart``); OpenAI's voice names
    already mean the default voice unless mapped here."""
    generate_kwargs: dict[str, Any] = {}
    """Keyword arguments for the model's mlx-audio ``generate`` (``temperature``,
    ``max_tokens``, ``lang_code``, ``cfg_scale`` …)."""

    def worker_options(self) -> dict[str, Any]:
        """``WorkerSpec.options`` of a tts model's worker (see :mod:`..workers.tts`)."""
        options: dict[str, Any] = {"voice_aliases": voice_aliases(self)}
        if self.voice is not None:
            options["voice"] = self.voice
        if self.generate_kwargs:
            options["generate_kwargs"] = dict(self.generate_kwargs)
        return options


ENTRIES = (TtsConfig,)
"""The Structs of this kind's ``model_type`` values (the kind table's order)."""


def voice_aliases(model: TtsConfig) -> dict[str, str | None]:
    """Every alias of ``model``: OpenAI's names (→ the default voice, ``None``) and
    the entry's ``voices:`` mapping, which wins."""
    aliases: dict[str, str | None] = dict.fromkeys(OPENAI_VOICES)
    aliases.update(model.voices)
    return aliases
