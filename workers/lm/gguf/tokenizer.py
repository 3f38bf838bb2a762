"""The tokenizer and chat template of a GGUF, as the files mlx-lm loads
(``tokenizer.json``, ``tokenizer_config.json``).

The metadata (``tokenizer.ggml.*``, ``tokenizer.chat_template``) is read with the
``gguf`` package, and the tokenizer is built by transformers' own GGUF tokenizer
converter (byte-level BPE, SentencePiece, Gemma's and Phi-3's variants, the
pre-tokenizer splits of each ``tokenizer.ggml.pre``): no tokenizer logic here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gguf import GGUFReader

from mlx_gateway.workers.lm.gguf.arch import GgufError

SPECIAL = {
    "bos_token": "bos_token_id",
    "eos_token": "eos_token_id",
    "unk_token": "unknown_token_id",
    "pad_token": "padding_token_id",
}


def field(reader: GGUFReader, key: str, default: Any = None) -> Any:
    """The value of metadata ``key`` (a list for an array), or ``default``."""
    entry = reader.fields.get(key)
    return default if entry is None else entry.contents()


def write_tokenizer(reader: GGUFReader, architecture: str, out: Path, context: int) -> int:
    """Write the tokenizer files into ``out``; return the vocabulary's size."""
    from transformers import PreTrainedTokenizerFast
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        GGUF_TOKENIZER_MAPPING,
        convert_gguf_tokenizer,
    )

    groups: dict[str, dict[str, Any]] = {}
    for group, names in GGUF_TOKENIZER_MAPPING.items():
        groups[group] = {
            name: field(reader, f"tokenizer.{key}")
            for key, name in names.items()
            if f"tokenizer.{key}" in reader.fields
        }
    tokens = groups["tokenizer"].get("tokens")
    if not tokens:
        raise GgufError(
            "the GGUF has no tokenizer (tokenizer.ggml.tokens): it cannot be served alone; "
            "use a GGUF written by llama.cpp's converter"
        )
    settings = groups["tokenizer_config"]
    if groups["tokenizer"].get("tokenizer_type") == "llama":
        # llama.cpp adds BOS to a SentencePiece vocabulary that does not say otherwise
        settings.setdefault("add_bos_token", True)
    for name, key in SPECIAL.items():
        index = field(reader, f"tokenizer.ggml.{key}")
        if index is not None and 0 <= int(index) < len(tokens):
            settings[name] = tokens[int(index)]
    try:
        backend, extra = convert_gguf_tokenizer(architecture, groups["tokenizer"])
    except (ValueError, KeyError) as exc:
        raise GgufError(f"the GGUF's tokenizer cannot be rebuilt: {exc}") from None
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, model_max_length=context, **settings, **extra
    )
    tokenizer.save_pretrained(str(out))
    return len(tokens)
