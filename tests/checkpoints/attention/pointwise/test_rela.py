"""ReLA: the reference against the paper's formula, the streaming path against
the reference, the gated RMSNorm, and a layer run in chunks over a KV cache."""

from __future__ import annotations

import math

import pytest
import torch

from checkpoints.attention.masks import causal_mask
from checkpoints.attention.pointwise.chunked import rela_chunked
from checkpoints.attention.pointwise.reference import rela_reference
from checkpoints.attention.pointwise.rela import gated_rms_norm
from checkpoints.attention.stats import stats_from_weights
from tests.checkpoints.attention.nonsoftmax_cases import (
    SHAPES,
    assert_stats_close,
    make_config,
    make_layer,
    qkv,
)
from tests.checkpoints.attention.softmax_family_cases import assert_close, run_chunks


def test_reference_is_relu_of_scaled_scores():
    q, k, v = qkv(10, 10, 16, hq=2, hkv=2)
    out, w = rela_reference(q, k, v, 0)
    want = torch.relu(q @ k.transpose(-1, -2) / 4.0) * causal_mask(10, 10, 0, q.device)
    torch.testing.assert_close(w, want)
    torch.testing.assert_close(out, want @ v)
    assert (w == 0).any() and (w > 0).any()


@pytest.mark.parametrize("t,s", SHAPES + [(300, 300)])
@pytest.mark.parametrize("d", [32, 64])
def test_chunked_matches_reference(t, s, d):
    q, k, v = qkv(t, s, d, seed=t + d)
    ref, w = rela_reference(q, k, v, s - t)
    out = torch.full_like(ref, float("nan"))
    _, st = rela_chunked(q, k, v, s - t, block=32, collect_stats=True, layer=1, out=out)
    assert_close(out, ref)
    assert_stats_close(st, stats_from_weights(w, causal_mask(t, s, s - t, q.device), 1))


def test_gated_rms_norm_formula():
    x = torch.randn(2, 3, 8)
    scale, gate = torch.rand(8) + 0.5, torch.randn(8)
    want = scale * x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-8) * torch.sigmoid(gate * x)
    torch.testing.assert_close(gated_rms_norm(x, scale, gate), want)


def test_layer_chunked_prefill_and_decode_match_one_reference_prefill():
    config = make_config("rela")
    layer = make_layer(config)
    assert layer.norm_scale.shape == (4 * 32,) and layer.norm_gate.shape == (4 * 32,)
    x = torch.randn(1, 70, 64, generator=torch.Generator().manual_seed(5))
    ref, _ = run_chunks(layer, config, x, [70], "reference")
    got, _ = run_chunks(layer, config, x, [40, 27, 1, 1, 1], "torch", block=16)
    assert_close(got, ref)
    assert math.isfinite(float(got.sum()))
