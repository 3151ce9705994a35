"""Softpick and the two variants of its paper's appendix B (scalable-softpick,
rectified-only softmax): the dense reference against each formula, and the
streaming path (outputs and row statistics) against the reference."""

from __future__ import annotations

import math

import pytest
import torch

from checkpoints.attention.masks import causal_mask
from checkpoints.attention.softpick.chunked import softpick_chunked
from checkpoints.attention.softpick.reference import softpick_reference
from checkpoints.attention.stats import stats_from_weights
from tests.checkpoints.attention.nonsoftmax_cases import (
    SHAPES,
    assert_stats_close,
    make_config,
    make_layer,
    qkv,
)
from tests.checkpoints.attention.softmax_family_cases import assert_close, run_chunks


def test_reference_is_the_papers_formula():
    q, k, v = qkv(9, 9, 16, hq=2, hkv=2, seed=1, scale=0.7)
    _, w = softpick_reference(q, k, v, 0, eps=1e-6)
    z = (q @ k.transpose(-1, -2)) / 4.0
    e = torch.exp(z) - 1
    vis = causal_mask(9, 9, 0, q.device)
    want = torch.relu(e) * vis / ((e.abs() * vis).sum(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(w, want, rtol=1e-5, atol=1e-6)
    assert (w[..., ~vis] == 0).all()


def test_rows_with_only_nonpositive_scores_output_zero():
    q, k, v = qkv(5, 5, 8, hq=1, hkv=1)
    q, k = q.abs(), -k.abs()  # every score q.k < 0
    out, w = softpick_reference(q, k, v, 0)
    assert (out == 0).all() and (w == 0).all()
    got, st = softpick_chunked(q, k, v, 0, block=2, collect_stats=True)
    assert (got == 0).all()
    assert (st.abs_sum == 0).all() and (st.entropy == 0).all() and torch.equal(st.zeros, st.visible)


def test_large_negative_scores_stay_finite():
    q, k, v = qkv(4, 4, 8, hq=1, hkv=1)
    q, k = q * 30, -k.abs() * 30  # visible maxima far below -88: e^{-m} would overflow fp32
    for out in (softpick_reference(q, k, v, 0)[0], softpick_chunked(q, k, v, 0, block=2)[0]):
        assert torch.isfinite(out).all()


@pytest.mark.parametrize("t,s", SHAPES + [(300, 300)])
@pytest.mark.parametrize("d", [32, 64])
def test_chunked_matches_reference(t, s, d):
    q, k, v = qkv(t, s, d, seed=t + d, scale=1.5)
    ref, w = softpick_reference(q, k, v, s - t)
    out = torch.full_like(ref, float("nan"))
    softpick_chunked(q, k, v, s - t, block=32, out=out)
    assert_close(out, ref)
    _, st = softpick_chunked(q, k, v, s - t, block=32, collect_stats=True, layer=3)
    assert_stats_close(st, stats_from_weights(w, causal_mask(t, s, s - t, q.device), 3))


def test_weights_do_not_sum_to_one():
    q, k, v = qkv(40, 40, 32, scale=1.5)
    _, w = softpick_reference(q, k, v, 0)
    sums = w.sum(-1)
    assert (sums < 1).all() and (sums >= 0).all()


@pytest.mark.parametrize("d", [32, 64])
def test_layer_chunked_prefill_and_decode_match_one_reference_prefill(d):
    config = make_config("softpick", head_dim=d)
    layer = make_layer(config)
    x = torch.randn(1, 70, 64, generator=torch.Generator().manual_seed(5))
    ref, ref_stats = run_chunks(layer, config, x, [70], "reference", collect_stats=True)
    got, stats = run_chunks(layer, config, x, [40, 27, 1, 1, 1], "torch", block=16, collect_stats=True)
    assert_close(got, ref)
    assert len(stats) == 5
    cat = torch.cat([s.abs_sum for s in stats], dim=2)
    assert torch.allclose(cat, ref_stats[0].abs_sum, atol=1e-5)
    assert math.isfinite(float(cat.sum()))


def test_rectified_softmax_reference_is_relu_over_softmaxs_denominator():
    q, k, v = qkv(9, 9, 16, hq=2, hkv=2, seed=2, scale=0.7)
    _, w = softpick_reference(q, k, v, 0, eps=1e-6, denominator="exp")
    z = (q @ k.transpose(-1, -2)) / 4.0
    vis = causal_mask(9, 9, 0, q.device)
    want = torch.relu(torch.exp(z) - 1) * vis / ((torch.exp(z) * vis).sum(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(w, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="denominator"):
        softpick_reference(q, k, v, 0, denominator="sum")


def test_scalable_softpick_reference_scales_each_row_by_s_log_n():
    """n_i = i + 1 keys (log_offset 1, the paper): the first row's factor is log 1 = 0."""
    from checkpoints.attention.softpick.layer import ScalableSoftpickAttention

    config = make_config("scalable_softpick", head_dim=16, heads=2, kv_heads=2)
    layer = make_layer(config)
    with torch.no_grad():
        layer.ssmax_s.copy_(torch.tensor([0.4, 1.3]))
    assert isinstance(layer, ScalableSoftpickAttention) and layer.params["log_offset"] == 1.0
    q, k, v = qkv(9, 9, 16, hq=2, hkv=2, seed=3, scale=0.9)
    _, w = layer.reference(0, q, k, v)
    factor = torch.tensor([0.4, 1.3])[:, None] * torch.log(torch.arange(9.0) + 1)[None, :]
    z = factor[None, :, :, None] * (q @ k.transpose(-1, -2)) / 4.0
    vis = causal_mask(9, 9, 0, q.device)
    e = torch.exp(z) - 1
    want = torch.relu(e) * vis / ((e.abs() * vis).sum(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(w, want, rtol=1e-5, atol=1e-6)
    assert (w[:, :, 0] == 0).all()  # row 0: z = 0 -> e^0 - 1 = 0


@pytest.mark.parametrize("t,s", SHAPES)
def test_rectified_softmax_chunked_matches_reference(t, s):
    q, k, v = qkv(t, s, 32, seed=t + 7, scale=1.5)
    ref, w = softpick_reference(q, k, v, s - t, denominator="exp")
    out = torch.full_like(ref, float("nan"))
    _, st = softpick_chunked(q, k, v, s - t, denominator="exp", block=32, collect_stats=True, layer=3, out=out)
    assert_close(out, ref)
    assert_stats_close(st, stats_from_weights(w, causal_mask(t, s, s - t, q.device), 3))


@pytest.mark.parametrize("variant", ["scalable_softpick", "rectified_softmax"])
def test_appendix_b_layers_chunked_prefill_and_decode_match_one_reference_prefill(variant):
    config = make_config(variant, head_dim=32)
    layer = make_layer(config)
    if variant == "scalable_softpick":
        with torch.no_grad():
            layer.ssmax_s.copy_(torch.tensor([0.2, 0.5, 0.9, 1.4]))
    x = 2 * torch.randn(1, 70, 64, generator=torch.Generator().manual_seed(6))
    ref, ref_stats = run_chunks(layer, config, x, [70], "reference", collect_stats=True)
    got, stats = run_chunks(layer, config, x, [40, 27, 1, 1, 1], "torch", block=16, collect_stats=True)
    assert_close(got, ref)
    cat = torch.cat([s.abs_sum for s in stats], dim=2)
    assert torch.allclose(cat, ref_stats[0].abs_sum, atol=1e-5)
