"""Nemotron-H's Mamba2 layers in a batch of prompts of different lengths.

``BatchGenerator`` prefills prompts of different lengths together, right-padded: each
recurrent cache is told the rows' lengths (``ArraysCache.prepare(lengths=…)``) and a
Mamba2 mixer must keep each row's state as it stood at that row's last real token.
mlx-lm 0.32's ``NemotronHMamba2Mixer._ssm`` does not pass the cache's ``lengths`` to
``ssm_update`` (Falcon-H1's and Granite 4's mixers do), so a shorter prompt's state
runs on through its padding and the answer is wrong; no error says so.

:func:`ssm_with_lengths` is that method with the lengths passed, as Falcon-H1's does.
:func:`install` checks on a tiny mixer whether mlx-lm's own method already gives each
row of a right-padded batch the output it gives that row alone (a later mlx-lm), and
keeps it then; else it puts :func:`ssm_with_lengths` in its place if that one does.
When neither does, it answers False: the worker then prefills one prompt per step
for such a model (a slower prefill, never a wrong answer). :func:`library_method`
brings mlx-lm's own back for a while (to show what the correction corrects).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_map
from mlx_lm.models.cache import ArraysCache
from mlx_lm.models.nemotron_h import ModelArgs, NemotronHMamba2Mixer
from mlx_lm.models.ssm import ssm_update

log = logging.getLogger(__name__)

Ssm = Callable[..., mx.array]

LIBRARY_SSM: Ssm = NemotronHMamba2Mixer._ssm
"""mlx-lm's own ``NemotronHMamba2Mixer._ssm``, as imported."""


def ssm_with_lengths(
    self: NemotronHMamba2Mixer,
    hidden_states: mx.array,
    B: mx.array,
    C: mx.array,
    dt: mx.array,
    cache: ArraysCache | None,
    mask: mx.array | None,
) -> mx.array:
    """``NemotronHMamba2Mixer._ssm`` that hands ``ssm_update`` the rows' lengths
    (``cache.lengths``; None outside a padded prefill, as before)."""
    batch, length, _ = hidden_states.shape
    hidden_states = hidden_states.reshape(batch, length, self.num_heads, self.head_dim)
    B = B.reshape(batch, length, self.n_groups, self.ssm_state_size)
    C = C.reshape(batch, length, self.n_groups, self.ssm_state_size)
    state, lengths = (cache[1], cache.lengths) if cache else (None, None)
    y, state = ssm_update(
        hidden_states,
        self.A_log,
        B,
        C,
        self.D.astype(hidden_states.dtype),
        dt,
        self.dt_bias,
        state,
        cast(tuple[float, float], self.time_step_limit),  # set by ModelArgs.__post_init__
        mask,
        lengths,
    )
    if cache:
        cache[1] = state
    return y.reshape(batch, length, self.intermediate_size)


CORRECTED_SSM: Ssm = ssm_with_lengths
"""The method :func:`install` puts in place when mlx-lm's is wrong."""


@contextmanager
def _method(ssm: Ssm) -> Iterator[None]:
    current = NemotronHMamba2Mixer._ssm
    NemotronHMamba2Mixer._ssm = ssm  # type: ignore[method-assign]
    try:
        yield
    finally:
        NemotronHMamba2Mixer._ssm = current  # type: ignore[method-assign]


@contextmanager
def library_method() -> Iterator[None]:
    """mlx-lm's own ``NemotronHMamba2Mixer._ssm`` while the block runs."""
    with _method(LIBRARY_SSM):
        yield


_PROBE_LENGTHS = (5, 12)
_HIDDEN = 32


def _probe_mixer() -> NemotronHMamba2Mixer:
    """A tiny float32 mixer with deterministic weights of a useful size."""
    args = ModelArgs.from_dict(
        {
            "model_type": "nemotron_h",
            "vocab_size": 8,
            "hidden_size": _HIDDEN,
            "intermediate_size": _HIDDEN,
            "max_position_embeddings": 64,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "attention_bias": False,
            "mamba_num_heads": 2,
            "mamba_head_dim": 8,
            "mamba_proj_bias": False,
            "ssm_state_size": 8,
            "conv_kernel": 4,
            "n_groups": 1,
            "mlp_bias": False,
            "layer_norm_epsilon": 1e-5,
            "use_bias": False,
            "use_conv_bias": True,
            "hybrid_override_pattern": ["M"],
        }
    )
    mixer = NemotronHMamba2Mixer(args)
    keys = iter(mx.random.split(mx.random.key(32), 16))  # more than its parameters
    mixer.update(
        tree_map(lambda p: 0.5 * mx.random.normal(p.shape, key=next(keys)), mixer.parameters())
    )
    return mixer


def _decode_after(mixer: nn.Module, prompt: mx.array, lengths: list[int]) -> mx.array:
    """Prefill the rows of ``prompt`` (right-padded to the longest of ``lengths``) in
    one batch, as ``BatchGenerator`` does, then run one decode step: its output."""
    cache = ArraysCache(size=2)
    longest = prompt.shape[1]
    if any(n < longest for n in lengths):
        cache.prepare(lengths=lengths, right_padding=[longest - n for n in lengths])
    mixer(prompt, cache.make_mask(longest), cache)
    cache.finalize()
    step = mx.ones((prompt.shape[0], 1, _HIDDEN))
    out: mx.array = mixer(step, cache.make_mask(1), cache)
    return out


def right_when_batched(ssm: Ssm) -> bool:
    """Does a mixer with ``ssm`` as its ``_ssm`` give each row of a right-padded batch
    the state (seen through the next decode step) it gives that row alone?"""
    with _method(ssm):
        mixer = _probe_mixer()
        lengths = list(_PROBE_LENGTHS)
        prompt = mx.random.normal((len(lengths), max(lengths), _HIDDEN), key=mx.random.key(7))
        batched = _decode_after(mixer, prompt, lengths)
        for row, length in enumerate(lengths):
            alone = _decode_after(mixer, prompt[row : row + 1, :length], [length])
            if not mx.allclose(batched[row], alone[0], rtol=1e-4, atol=1e-4).item():
                return False
    return True


def install() -> bool:
    """Make Nemotron-H's Mamba2 layers right in a batch of prompts of different lengths
    (mlx-lm's own method when it is, else :data:`CORRECTED_SSM` if that one is); False
    when neither is (prefill such a model one prompt per step). Runs MLX work: call it
    on the thread (and stream) that generates."""
    if NemotronHMamba2Mixer._ssm is CORRECTED_SSM is not LIBRARY_SSM:
        return True  # installed and checked by an earlier load
    try:
        if right_when_batched(LIBRARY_SSM):
            log.info("this mlx-lm's Nemotron-H Mamba2 layers are right in a padded batch; kept")
            return True
        if right_when_batched(CORRECTED_SSM):
            NemotronHMamba2Mixer._ssm = CORRECTED_SSM  # type: ignore[method-assign]
            log.warning(
                "this mlx-lm's Nemotron-H Mamba2 layers ignore the lengths of a padded "
                "batch (wrong answers when prompts of different lengths prefill together); "
                "corrected: the cache's lengths are passed to ssm_update"
            )
            return True
    except Exception:
        log.warning("checking Nemotron-H's Mamba2 layers in a batch failed", exc_info=True)
        return False
    log.warning(
        "this mlx-lm's Nemotron-H Mamba2 layers are wrong in a padded batch and the "
        "correction does not help: such a model prefills one prompt per step"
    )
    return False


def batches_right(model: Any) -> bool:
    """Whether ``model`` may prefill prompts of different lengths together: True for
    a model without Nemotron-H Mamba2 layers, else what :func:`install` answers."""
    if not any(isinstance(m, NemotronHMamba2Mixer) for _, m in model.named_modules()):
        return True
    return install()
