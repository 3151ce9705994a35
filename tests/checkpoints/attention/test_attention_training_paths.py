"""Demo models are trained on the `reference` and `torch` paths (checkpoints/
train.py): every learnable parameter a variant declares must receive a
gradient there, and the streaming path's gradients must equal the
reference's. (ssmax's `s` and diff's lambda vectors were once detached and
never trained; cog and ALiBi models broke autograd on the streaming path.)"""

from __future__ import annotations

import pytest
import torch

from checkpoints.attention.base import AttentionContext
from checkpoints.attention.registry import available_variants
from checkpoints.rope import Rotary
from tests.checkpoints.attention import nonsoftmax_cases, softmax_family_cases

PARAMS = {"entmax": {"length_scaling": True}, "tda": {"learn_gain": True, "beta_per_head": True},
          "tra": {"learn_gain": True}}


def _layer(variant: str, position: str):
    if variant in softmax_family_cases.VARIANTS:
        config = softmax_family_cases.make_config(variant, position=position)
        return config, softmax_family_cases.make_layer(config)
    config = nonsoftmax_cases.make_config(variant, params=PARAMS.get(variant), position=position)
    return config, nonsoftmax_cases.make_layer(config)


def _grads(layer, config, x: torch.Tensor, backend: str) -> dict[str, torch.Tensor | None]:
    layer.zero_grad()
    rotary = Rotary(config)
    rotary.set_length(x.shape[1])
    out = layer(x, AttentionContext(rotary=rotary, start=0, backend=backend, block_size=8), None)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return {n: None if p.grad is None else p.grad.clone() for n, p in layer.named_parameters()}


@pytest.mark.parametrize("variant,position", [(v, "rope") for v in available_variants()]
                         + [("softmax", "alibi"), ("cog", "nape")])
def test_every_parameter_trains_and_torch_gradients_match_reference(variant, position):
    config, layer = _layer(variant, position)
    x = torch.randn(1, 20, 64, generator=torch.Generator().manual_seed(0))
    ref = _grads(layer, config, x, "reference")
    silent = [n for n, g in ref.items() if g is None or not g.abs().sum() > 0]
    assert not silent, f"parameters without gradient: {silent}"
    got = _grads(layer, config, x, "torch")
    for name, g in ref.items():
        assert got[name] is not None, name
        err = (got[name] - g).abs().max().item()
        assert err <= 1e-4 * g.abs().max().item(), f"{name}: max abs error {err:.3g}"
