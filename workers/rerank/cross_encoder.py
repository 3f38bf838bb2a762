"""Cross-encoders: an mlx-embeddings encoder with its sequence-classification head.

A cross-encoder checkpoint (``BertForSequenceClassification``,
``XLMRobertaForSequenceClassification``, ``RobertaForSequenceClassification``)
holds the encoder under ``bert.`` or ``roberta.`` and a ``classifier``. The encoder
is mlx-embeddings' own model of that ``model_type``; the head is built here as the
architecture defines it:

* BERT: the encoder's pooler (dense + tanh on the first token) → ``classifier``;
* (XLM-)RoBERTa: ``classifier.dense`` + tanh on the first token's state →
  ``classifier.out_proj``.

The score of a pair is the head's logit through the activation the model's config
names (sentence-transformers' ``activation_fn``), sigmoid when it names none (the
default of sentence-transformers' CrossEncoder for one label); a two-label head
scores with the probability of label 1.
"""

from __future__ import annotations

import glob
import logging
from pathlib import Path
from typing import Any, cast

import mlx.core as mx
import mlx.nn as nn
from mlx_embeddings.utils import _get_classes

from mlx_gateway.workers.runtime.contract import LoadError

log = logging.getLogger(__name__)

HEADS = {
    "BertForSequenceClassification": ("bert", "pooler"),
    "XLMRobertaForSequenceClassification": ("roberta", "dense"),
    "RobertaForSequenceClassification": ("roberta", "dense"),
}
"""Supported architectures: the encoder's weight prefix and the head's shape."""

ACTIVATIONS = {"Sigmoid": "sigmoid", "Identity": "identity", "Tanh": "tanh"}
"""sentence-transformers activation class names → ours."""


def is_cross_encoder(config: dict[str, Any]) -> bool:
    return any(str(a).endswith("ForSequenceClassification") for a in _architectures(config))


def _architectures(config: dict[str, Any]) -> list[str]:
    value = config.get("architectures") or []
    return [str(a) for a in value] if isinstance(value, list) else [str(value)]


class _RobertaHead(nn.Module):
    def __init__(self, hidden: int, labels: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, labels)

    def __call__(self, first: mx.array) -> mx.array:
        return self.out_proj(mx.tanh(self.dense(first)))


class CrossEncoder(nn.Module):
    """Encoder + classification head; ``__call__`` returns the logits."""

    def __init__(self, encoder: nn.Module, head: str, hidden: int, labels: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.head = head
        self.classifier = (
            nn.Linear(hidden, labels) if head == "pooler" else _RobertaHead(hidden, labels)
        )

    def __call__(
        self, input_ids: mx.array, attention_mask: mx.array, token_type_ids: mx.array
    ) -> mx.array:
        out = self.encoder(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        if self.head == "pooler":
            return self.classifier(out.pooler_output)
        return self.classifier(out.last_hidden_state[:, 0])


def activation_of(config: dict[str, Any], labels: int) -> str:
    """The score activation the model's config names (see the module docstring)."""
    st = config.get("sentence_transformers")
    named = st.get("activation_fn") if isinstance(st, dict) else None
    named = named or config.get("sbert_ce_default_activation_function")
    if labels == 2:
        return "softmax"
    if not named:
        return "sigmoid"
    short = str(named).rsplit(".", 1)[-1]
    if short not in ACTIVATIONS:
        raise LoadError(
            f"the model's score activation {named!r} is not supported "
            f"(supported: {', '.join(ACTIVATIONS)})"
        )
    return ACTIVATIONS[short]


def scores_of(logits: mx.array, activation: str) -> mx.array:
    """One relevance score per row of ``logits``."""
    if activation == "softmax":
        return mx.softmax(logits.astype(mx.float32), axis=-1)[:, 1]
    row = logits[:, 0].astype(mx.float32)
    if activation == "sigmoid":
        return mx.sigmoid(row)
    if activation == "tanh":
        return mx.tanh(row)
    return row


def load_cross_encoder(path: Path, config: dict[str, Any]) -> tuple[CrossEncoder, str]:
    """The model in ``path`` and its score activation; :class:`LoadError` for an
    architecture or head this module does not know."""
    arch = next((a for a in _architectures(config) if a in HEADS), None)
    if arch is None:
        raise LoadError(
            f"cross-encoder architecture {_architectures(config)} is not supported "
            f"(supported: {', '.join(HEADS)})"
        )
    prefix, head = HEADS[arch]
    labels = int(config.get("num_labels") or len(config.get("id2label") or {}) or 1)
    if labels not in (1, 2):
        raise LoadError(
            f"a reranker scores with one label (or two: the probability of label 1); "
            f"this model has {labels} ({arch})"
        )
    weights: dict[str, mx.array] = {}
    for file in sorted(glob.glob(str(path / "*.safetensors"))):
        weights.update(cast(dict[str, mx.array], mx.load(file)))
    if not weights:
        raise LoadError(f"no .safetensors weights in {path}")
    encoder_weights = {}
    head_weights = {}
    for key, value in weights.items():
        if key.startswith("classifier."):
            head_weights[key] = value
        else:
            encoder_weights[key.removeprefix(f"{prefix}.")] = value
    encoder_config = dict(config)
    if prefix == "roberta":
        encoder_config["add_pooling_layer"] = any(k.startswith("pooler.") for k in encoder_weights)
    try:
        model_class, args_class, _, _ = _get_classes(encoder_config)
    except ValueError as exc:
        raise LoadError(str(exc)) from None
    encoder = model_class(args_class.from_dict(encoder_config))
    encoder_weights = encoder.sanitize(encoder_weights)
    model = CrossEncoder(encoder, head, int(config["hidden_size"]), labels)
    merged = {f"encoder.{k}": v for k, v in encoder_weights.items()} | head_weights
    quantization = config.get("quantization")
    if isinstance(quantization, dict):

        def quantized(name: str, module: nn.Module) -> bool:
            return hasattr(module, "to_quantized") and f"{name}.scales" in merged

        nn.quantize(
            model,
            group_size=int(quantization.get("group_size", 64)),
            bits=int(quantization.get("bits", 4)),
            class_predicate=quantized,
        )
    try:
        model.load_weights(list(merged.items()))
    except ValueError as exc:
        raise LoadError(f"the weights do not fit {arch}: {exc}") from None
    mx.eval(model.parameters())
    model.eval()
    return model, activation_of(config, labels)
