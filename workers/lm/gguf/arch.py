"""What llama.cpp's architectures are called in mlx-lm: the ``config.json`` a GGUF's
metadata makes, and the mlx-lm name of each of its tensors.

An architecture is listed here when mlx-lm has the model and its GGUF tensors map
one to one onto mlx-lm's parameters (with at most the two reversible changes
llama.cpp's converter makes: the interleaved q/k rows of the llama family, and the
``1 +`` that Gemma's norms carry). Anything else is refused by name
(:class:`GgufError`), never half converted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlx_gateway.workers.runtime.contract import LoadError


class GgufError(LoadError):
    """A GGUF this converter cannot turn into an mlx-lm model (the message says which
    architecture, tensor or type, and what to use instead)."""


Meta = Callable[[str, Any], Any]
"""``meta(key, default)``: a metadata value, ``{arch}`` in the key replaced."""

BLOCK = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_qkv": "self_attn.qkv_proj",
    "attn_output": "self_attn.o_proj",
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
"""llama.cpp's block tensor names (``blk.N.<name>.weight``) → mlx-lm's
(``model.layers.N.<name>.weight``), as most architectures use them."""

TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}

GEMMA_NORMS = {
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}

MOE = {
    "ffn_gate_inp": "mlp.gate",
    "ffn_gate_exps": "mlp.switch_mlp.gate_proj",
    "ffn_up_exps": "mlp.switch_mlp.up_proj",
    "ffn_down_exps": "mlp.switch_mlp.down_proj",
}


@dataclass(frozen=True)
class Arch:
    """How one GGUF architecture becomes an mlx-lm model."""

    model_type: str
    permuted_qk: bool = False
    """llama.cpp's converter interleaves the q/k rows of the llama family (for its
    rotary embedding); they are put back in Hugging Face's order."""
    norm_offset: float = 0.0
    """Gemma's norms are stored as ``1 + w`` by llama.cpp; mlx-lm adds the 1 itself."""
    blocks: dict[str, str] = field(default_factory=dict)
    """Block names that differ from :data:`BLOCK` for this architecture."""
    extra: Callable[[Meta, dict[str, Any]], dict[str, Any]] | None = None
    """Config keys of this architecture only."""

    def target(self, name: str) -> str | None:
        """The mlx-lm name of the GGUF tensor ``name`` (``None`` when unknown)."""
        parts = name.split(".")
        if parts[0] == "blk" and len(parts) >= 4:
            local = ".".join(parts[2:-1])
            mapped = self.blocks.get(local, BLOCK.get(local))
            if mapped is None:
                return None
            return f"model.layers.{parts[1]}.{mapped}.{parts[-1]}"
        if len(parts) == 2 and parts[0] in TOP:
            return f"{TOP[parts[0]]}.{parts[1]}"
        return None


def _gemma(meta: Meta, config: dict[str, Any]) -> dict[str, Any]:
    return {
        "head_dim": meta(
            "{arch}.attention.key_length", config["hidden_size"] // config["num_attention_heads"]
        )
    }


def _query_scalar(config: dict[str, Any], head_dim: int, layers_27b: int) -> int:
    """Gemma's ``query_pre_attn_scalar``, which GGUF does not store: llama.cpp scales
    by ``hidden_size / heads`` for the 27B model (told by its layer count) and by the
    head size for every other size, as Google's configs do."""
    if config["num_hidden_layers"] == layers_27b:
        return int(config["hidden_size"] // config["num_attention_heads"])
    return head_dim


def _gemma2(meta: Meta, config: dict[str, Any]) -> dict[str, Any]:
    out = _gemma(meta, config)
    out["attn_logit_softcapping"] = meta("{arch}.attn_logit_softcapping", 50.0)
    out["final_logit_softcapping"] = meta("{arch}.final_logit_softcapping", 30.0)
    out["query_pre_attn_scalar"] = _query_scalar(config, out["head_dim"], 46)
    return out


def _gemma3(meta: Meta, config: dict[str, Any]) -> dict[str, Any]:
    out = _gemma(meta, config)
    out["query_pre_attn_scalar"] = _query_scalar(config, out["head_dim"], 62)
    out["sliding_window"] = meta("{arch}.attention.sliding_window", 512)
    out["sliding_window_pattern"] = meta("{arch}.attention.sliding_window_pattern", 6)
    out["rope_local_base_freq"] = 10_000.0
    return out


def _qwen3moe(meta: Meta, config: dict[str, Any]) -> dict[str, Any]:
    return {
        "num_experts": meta("{arch}.expert_count", 0),
        "num_experts_per_tok": meta("{arch}.expert_used_count", 0),
        "moe_intermediate_size": meta("{arch}.expert_feed_forward_length", 0),
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "norm_topk_prob": True,
    }


def _granite(meta: Meta, config: dict[str, Any]) -> dict[str, Any]:
    # llama.cpp scales attention by 1/sqrt(head size) when attention.scale is absent
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    return {
        "embedding_multiplier": meta("{arch}.embedding_scale", 1.0),
        "residual_multiplier": meta("{arch}.residual_scale", 1.0),
        "attention_multiplier": meta("{arch}.attention.scale", 0.0) or head_dim**-0.5,
        "logits_scaling": meta("{arch}.logit_scale", 1.0),
    }


def _phi3(meta: Meta, config: dict[str, Any]) -> dict[str, Any]:
    head_dim = config["hidden_size"] // config["num_attention_heads"]
    rotary = meta("{arch}.rope.dimension_count", head_dim)
    out: dict[str, Any] = {"partial_rotary_factor": rotary / head_dim}
    original = meta("{arch}.rope.scaling.original_context_length", None)
    if original:  # what LongRoPE's factors were trained from (rope_factors_*)
        out["original_max_position_embeddings"] = original
    return out


def _olmo2(meta: Meta, config: dict[str, Any]) -> dict[str, Any]:
    if meta("{arch}.attention.sliding_window", None):
        # llama.cpp writes OLMo 3 as olmo2 plus a sliding window, which mlx-lm's olmo2
        # model lacks: converted so, its long prompts would attend too far.
        raise GgufError(
            "GGUF architecture 'olmo2' with a sliding window (OLMo 3) cannot be converted "
            "to MLX; use an MLX copy of the model from the Hugging Face hub "
            "(mlx-community/…) instead"
        )
    return {}


ARCHES: dict[str, Arch] = {
    "llama": Arch("llama", permuted_qk=True),
    "qwen2": Arch("qwen2"),
    "qwen3": Arch("qwen3"),
    "qwen3moe": Arch("qwen3_moe", blocks=MOE, extra=_qwen3moe),
    "gemma": Arch("gemma", norm_offset=1.0, extra=_gemma),
    "gemma2": Arch("gemma2", norm_offset=1.0, blocks=GEMMA_NORMS, extra=_gemma2),
    "gemma3": Arch("gemma3_text", norm_offset=1.0, blocks=GEMMA_NORMS, extra=_gemma3),
    "phi3": Arch("phi3", blocks={"ffn_up": "mlp.gate_up_proj"}, extra=_phi3),
    "granite": Arch("granite", permuted_qk=True, extra=_granite),
    "olmo2": Arch(
        "olmo2",
        blocks={
            "post_attention_norm": "post_attention_layernorm",
            "post_ffw_norm": "post_feedforward_layernorm",
        },
        extra=_olmo2,
    ),
}
"""GGUF ``general.architecture`` → how it converts. Mistral's models are written
as ``llama`` by llama.cpp, so they convert with it."""

QK_NORM_MODELS = ("qwen3", "qwen3_moe", "gemma3_text")


def arch_of(name: str) -> Arch:
    """The :class:`Arch` of a GGUF architecture, or a :class:`GgufError` naming it."""
    arch = ARCHES.get(name)
    if arch is None:
        raise GgufError(
            f"GGUF architecture '{name}' cannot be converted to MLX (supported: "
            f"{', '.join(sorted(ARCHES))}); use an MLX copy of the model from the Hugging "
            "Face hub (mlx-community/…) instead"
        )
    return arch


def model_config(name: str, meta: Meta, vocab_size: int, tensor_names: set[str]) -> dict[str, Any]:
    """The ``config.json`` of the mlx-lm model a GGUF of architecture ``name`` makes."""
    arch = arch_of(name)
    heads = int(meta("{arch}.attention.head_count", 0))
    config: dict[str, Any] = {
        "model_type": arch.model_type,
        "hidden_size": meta("{arch}.embedding_length", 0),
        "num_hidden_layers": meta("{arch}.block_count", 0),
        "intermediate_size": meta("{arch}.feed_forward_length", 0),
        "num_attention_heads": heads,
        "num_key_value_heads": meta("{arch}.attention.head_count_kv", heads),
        "rms_norm_eps": meta("{arch}.attention.layer_norm_rms_epsilon", 1e-6),
        "max_position_embeddings": meta("{arch}.context_length", 4096),
        "rope_theta": meta("{arch}.rope.freq_base", 10_000.0),
        "vocab_size": vocab_size,
        "tie_word_embeddings": "output.weight" not in tensor_names,
    }
    if not config["hidden_size"] or not heads or not config["num_hidden_layers"]:
        raise GgufError(
            f"GGUF of architecture '{name}' lacks its sizes ({name}.embedding_length, "
            f"{name}.attention.head_count, {name}.block_count); the file is incomplete"
        )
    if isinstance(config["num_key_value_heads"], list):
        raise GgufError(
            f"GGUF of architecture '{name}' has a different number of KV heads per layer, "
            "which mlx-lm's model of it does not take"
        )
    key_length = meta("{arch}.attention.key_length", None)
    if key_length is not None:
        config["head_dim"] = key_length
    elif arch.model_type in QK_NORM_MODELS:
        config["head_dim"] = config["hidden_size"] // heads
    config["attention_bias"] = "blk.0.attn_q.bias" in tensor_names
    config["mlp_bias"] = "blk.0.ffn_down.bias" in tensor_names
    scaling = meta("{arch}.rope.scaling.type", None)
    if scaling in ("linear", "yarn"):
        config["rope_scaling"] = {
            "type": scaling,
            "rope_type": scaling,
            "factor": meta("{arch}.rope.scaling.factor", 1.0),
        }
        original = meta("{arch}.rope.scaling.original_context_length", None)
        if original:
            config["rope_scaling"]["original_max_position_embeddings"] = original
    elif scaling not in (None, "none"):
        raise GgufError(f"GGUF rope scaling '{scaling}' ({name}) has no mlx-lm equivalent")
    if arch.extra is not None:
        config.update(arch.extra(meta, config))
    return config
