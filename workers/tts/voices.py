"""The voices of a text-to-speech model, and which one a request's name means.

mlx-audio has no one way to list a model's voices: voice packs are files in the
model folder (``voices/*.safetensors``, Kokoro's layout), some models load a table
of them (Kitten's ``voices`` from ``voices.npz``), and some name their speakers
themselves (``get_supported_speakers()``, Qwen3-TTS). A model with none of these
has one voice, its own, called ``default`` here.

Beside the model's own names, a config entry may name aliases (``voices:`` — the
gateway adds OpenAI's built-in names, ``alloy`` … ``verse``, as aliases of the
default voice unless the entry maps them elsewhere) and a default voice
(``voice:``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from mlx_gateway.workers.runtime.contract import RequestError

log = logging.getLogger(__name__)

DEFAULT = "default"
"""The name of a model's default voice (its only one, when it has no list)."""


def model_voices(model: Any, path: Path) -> list[str]:
    """The voices ``model`` (loaded from ``path``) has, sorted; empty when it has
    only its own."""
    names: set[str] = set()
    folder = path / "voices"
    if folder.is_dir():
        names.update(file.stem for file in folder.glob("*.safetensors"))
    table = getattr(model, "voices", None)
    if isinstance(table, dict):
        names.update(str(name) for name in table)
    speakers = getattr(model, "get_supported_speakers", None)
    if callable(speakers):
        try:
            names.update(str(name) for name in speakers() or ())
        except Exception:  # a model without a speaker table raises; it has none
            log.debug("get_supported_speakers() failed", exc_info=True)
    return sorted(names)


class Voices:
    """Resolves a request's voice name to what the model's ``generate`` gets."""

    def __init__(
        self,
        own: list[str],
        aliases: dict[str, str | None],
        default: str | None,
        model_name: str,
    ) -> None:
        self.own = own
        self.aliases = aliases
        self.default = default
        self.model_name = model_name
        if default is not None and default not in own and own:
            raise ValueError(
                f"the default voice {default!r} is not one of the model's voices ({', '.join(own)})"
            )

    def names(self) -> list[str]:
        """Every name a request may give: the model's voices, then the aliases."""
        own = self.own or [DEFAULT]
        return [*own, *sorted(name for name in self.aliases if name not in own)]

    def resolve(self, name: str | None) -> str | None:
        """The model voice for ``name`` (``None``: the model's own default)."""
        if name is None or name == DEFAULT:
            return self.default
        if name in self.own:
            return name
        if name in self.aliases:
            target = self.aliases[name]
            return self.default if target is None or target == DEFAULT else target
        listed = ", ".join(self.names())
        raise RequestError(
            f"The voice '{name}' is not a voice of the model '{self.model_name}'. "
            f"Its voices: {listed} (more names can be mapped with the model's "
            "`voices:` setting).",
            param="voice",
            code="unknown_voice",
        )
