"""Speculative decoding of a solo request: a small draft model guesses a few
tokens, the model checks them all in one forward pass.

Each round the draft model (same vocabulary, far fewer weights) proposes up to
``draft_tokens`` tokens greedily, from its own KV cache. The model then reads its
last token and the proposals in one pass, which gives its next-token distribution
after each of them; the request's sampler draws a token from each. Proposals are
taken while they equal the model's own draws, and the draw after the last taken
proposal comes with them: one to ``draft_tokens + 1`` tokens per pass of the
model. Both caches are cut back to what was taken.

Every token is drawn from the model's distribution given exactly the tokens
before it, so the output is what the model alone would produce: the same ids for
greedy requests (up to the last bits of floating point: the model reads several
tokens per pass instead of one), the same distribution for sampled ones (a seed
draws other numbers, so seeded text differs from the plain loop's).

A request with logits processors (penalties, a grammar, a thinking budget: they
keep per-token state) decodes with the plain :class:`~.solo.SoloDecode` loop, as
does every request that runs in the batch. This module loads the draft model; the
decoding itself is :class:`~.solo.SpeculativeDecode`, beside the plain loop it refines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlx_lm import load as load_model_and_tokenizer
from mlx_lm.models.cache import make_prompt_cache

from mlx_gateway.workers.lm.prompt_cache import is_trimmable
from mlx_gateway.workers.runtime.contract import LoadError
from mlx_gateway.workers.runtime.hub import resolve_model_path

DRAFT_TOKENS = 3
"""Proposals per round when the spec's options leave ``num_draft_tokens`` out."""


class Draft:
    """A loaded draft model and how many tokens it proposes a round."""

    def __init__(self, model: Any, tokens: int, path: str) -> None:
        self.model = model
        self.tokens = tokens
        self.path = path


def load_draft(
    name: str,
    tokens: int,
    vocabulary: dict[str, int],
    trust_remote_code: bool,
    on_download: Callable[[str], None],
) -> Draft:
    """Load the draft model ``name`` (a folder or a hub id); refuse one whose
    tokenizer's vocabulary is not ``vocabulary`` (the model's) or whose KV cache
    cannot be cut back."""
    if tokens < 1:
        raise LoadError(f"num_draft_tokens must be at least 1, got {tokens}")
    path = resolve_model_path(name, on_download=on_download)
    model, tokenizer = load_model_and_tokenizer(
        str(path), tokenizer_config={"trust_remote_code": trust_remote_code}
    )[:2]
    theirs = tokenizer.get_vocab()
    if theirs != vocabulary:
        only_model = len(set(vocabulary.items()) - set(theirs.items()))
        only_draft = len(set(theirs.items()) - set(vocabulary.items()))
        raise LoadError(
            f"draft model {name} has another vocabulary than the model ({len(theirs)} "
            f"tokens against {len(vocabulary)}; {only_model} of the model's token ids and "
            f"{only_draft} of the draft's differ): a draft must share the model's "
            "tokenizer; pick one of the same family (e.g. a smaller size of the same model)"
        )
    if not is_trimmable(make_prompt_cache(model)):
        raise LoadError(
            f"draft model {name} keeps a KV cache that cannot be cut back (sliding "
            "windows or recurrent layers); pick a draft with plain attention layers"
        )
    return Draft(model, tokens, name)
