"""What an encoder model takes: its maximum input length, read from its files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FALLBACK_MAX_LENGTH = 512
"""Used when neither the config nor the model tells its maximum input length."""
_UNBOUNDED = 10**7  # tokenizers without a limit report model_max_length ≈ 1e30


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def max_input_length(
    path: Path, config: dict[str, Any], tokenizer: Any, configured: int | None
) -> int:
    """The longest input, in tokens: the config's ``context_length``, else what
    sentence-transformers uses (``max_seq_length``), else the tokenizer's limit,
    else the model's position table; never more than the position table."""
    positions = config.get("max_position_embeddings")
    if not isinstance(positions, int) or positions <= 0:
        positions = None
    elif config.get("model_type") in ("roberta", "xlm-roberta", "xlm_roberta", "camembert"):
        # RoBERTa-style position ids start after the padding index.
        positions -= 2
    candidates: list[Any] = [
        configured,
        read_json(path / "sentence_bert_config.json").get("max_seq_length"),
        getattr(tokenizer, "model_max_length", None),
        positions,
    ]
    limit = next(
        (v for v in candidates if isinstance(v, int) and 0 < v < _UNBOUNDED), FALLBACK_MAX_LENGTH
    )
    return min(limit, positions) if positions else limit
