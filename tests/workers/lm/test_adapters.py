"""The switched LoRA layers (``workers/adapters.py``) against mlx-lm's own LoRA
layers, on a quantized model too (a tiny real llama; mlx-lm's ``nn.quantize``)."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest

from mlx_gateway.workers.lm.adapters import Adapters, SwitchedLora, read_adapter
from mlx_gateway.workers.runtime.contract import RequestError
from tests.fixtures.tiny_models import build_tiny_adapter

PROMPT = mx.array([[5, 40, 41, 42, 43, 100, 7]])


def load(model_path: Path, quantized: bool) -> nn.Module:
    from mlx_lm import load as mlx_lm_load

    model = mlx_lm_load(str(model_path))[0]
    if quantized:
        nn.quantize(model, group_size=32, bits=4)
    return model


@pytest.mark.parametrize("quantized", [False, True])
def test_switched_layers_compute_what_mlx_lm_computes(
    tiny_lm_path: Path, tmp_path: Path, quantized: bool
) -> None:
    from mlx_lm.tuner.utils import load_adapters

    folder = build_tiny_adapter(tmp_path / "a", tiny_lm_path, seed=4)
    ours = load(tiny_lm_path, quantized)
    base_logits = ours(PROMPT)
    adapters = Adapters(ours)
    adapters.mount(read_adapter("a", str(folder)))
    wrapped = [m for _, m in ours.named_modules() if isinstance(m, SwitchedLora)]
    assert len(wrapped) == 2 * 3  # 2 layers x q_proj, v_proj, down_proj
    if quantized:
        assert all(isinstance(m.base, nn.QuantizedLinear) for m in wrapped)
    assert mx.allclose(ours(PROMPT), base_logits)  # mounted, not active: the base model
    adapters.activate(("a",))
    theirs = load_adapters(load(tiny_lm_path, quantized), str(folder))
    expected = theirs(PROMPT)
    assert not mx.allclose(expected, base_logits, atol=1e-3)
    assert mx.allclose(ours(PROMPT), expected, atol=1e-4)
    adapters.activate(())
    assert mx.allclose(ours(PROMPT), base_logits)


def test_an_adapter_that_does_not_fit_changes_nothing(tiny_lm_path: Path, tmp_path: Path) -> None:
    from tests.fixtures.tiny_models import build_tiny_lm

    model = load(tiny_lm_path, quantized=False)
    before = model(PROMPT)
    wider = build_tiny_lm(tmp_path / "wider", hidden=128)
    adapters = Adapters(model)
    with pytest.raises(RequestError, match="trained for another model"):
        adapters.mount(read_adapter("w", str(build_tiny_adapter(tmp_path / "w", wider))))
    assert not [m for _, m in model.named_modules() if isinstance(m, SwitchedLora)]
    assert mx.array_equal(model(PROMPT), before)
