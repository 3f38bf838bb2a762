"""How a request's model name finds its model: the one lookup behind
:meth:`.registry.Registry.resolve`, so that every surface (OpenAI, Anthropic,
Ollama, Realtime, admin) takes every name any list shows.

A model answers to its served name, its aliases and its ``model_path``, each also
written as Ollama writes names: with or without the default tag ``:latest``
(``/api/tags`` lists ``x`` as ``x:latest``), and in any case of the ASCII letters
(Ollama compares names case-insensitively). The looser a match, the later it is
tried, and the first step that finds a model wins:

1. the name exactly;
2. the name with ``:latest`` dropped or added;
3. the name in another case;
4. both.

Within a step a served name or alias comes before a ``model_path``, and an earlier
config entry before a later one. So two entries ``x`` and ``x:latest``, or ``Foo``
and ``foo``, each keep their own exact name, and a looser name always picks the
same one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, NamedTuple, Protocol, TypeVar

from mlx_gateway.supervisor.config import ModelConfig

DEFAULT_TAG = ":latest"
"""The tag Ollama fills in when a name has none."""

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def listed(name: str) -> str:
    """``name`` as Ollama lists it: with a tag (``:latest`` when it has none)."""
    tail = name.rsplit("/", 1)[-1]
    return name if ":" in tail else name + DEFAULT_TAG


def bare(name: str) -> str:
    """``name`` without the default tag."""
    return name.removesuffix(DEFAULT_TAG)


def fold(name: str) -> str:
    """``name`` with its ASCII letters in lower case (Ollama's own folding: other
    letters stay as they are)."""
    return name.translate(_ASCII_LOWER)


def _untagged_fold(name: str) -> str:
    return bare(fold(name))


STEPS: tuple[Callable[[str], str], ...] = (str, bare, fold, _untagged_fold)
"""The keys a name is compared by, strictest first."""


class _Configured(Protocol):
    @property
    def config(self) -> ModelConfig: ...


H = TypeVar("H", bound=_Configured)


class Match(NamedTuple, Generic[H]):
    handle: H
    name: str
    """The served name, alias or ``model_path`` the request's name matched."""


class NameIndex(Generic[H]):
    """Every name of ``handles`` (in config order), looked up as the module says."""

    def __init__(self, handles: Iterable[H]) -> None:
        handles = list(handles)
        ranked = [(name, h) for h in handles for name in h.config.names]
        ranked += [(h.config.model_path, h) for h in handles]
        self._tables: list[dict[str, Match[H]]] = []
        for key in STEPS:
            table: dict[str, Match[H]] = {}
            for name, handle in ranked:
                table.setdefault(key(name), Match(handle, name))
            self._tables.append(table)

    def find(self, name: str) -> Match[H] | None:
        """The model ``name`` names and the name it matched; ``None`` for none."""
        for key, table in zip(STEPS, self._tables, strict=True):
            if (found := table.get(key(name))) is not None:
                return found
        return None
