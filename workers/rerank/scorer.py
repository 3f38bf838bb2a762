"""What a loaded reranker does: turn a request into rows, and rows into scores."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from mlx_gateway.protocol.messages import Rerank
from mlx_gateway.workers.rerank.pairs import Pair


class Scorer(ABC):
    family: str
    """``cross-encoder`` or ``lm``."""
    max_length: int
    """The window: most tokens of one row."""
    tokenizer: Any
    facts: dict[str, str]

    @abstractmethod
    def rows(self, request: Rerank) -> list[list[Pair]]:
        """Per document, its rows (one, or its windows)."""

    @abstractmethod
    def score(self, pairs: list[Pair]) -> np.ndarray:
        """One score per row, in order (one forward pass)."""
