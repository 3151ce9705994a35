"""Threshold attention (tra) and Threshold Differential Attention (tda): the
reference against the paper's formulas, the streaming path against the
reference, and layers run in chunks over a KV cache."""

from __future__ import annotations

import math

import pytest
import torch

from checkpoints.attention.masks import causal_mask
from checkpoints.attention.pointwise.chunked import threshold_chunked
from checkpoints.attention.pointwise.reference import tda_reference, tra_reference
from checkpoints.attention.pointwise.threshold import rms_normalize
from checkpoints.attention.stats import stats_from_weights
from checkpoints.errors import ConfigError
from tests.checkpoints.attention.nonsoftmax_cases import (
    SHAPES,
    assert_stats_close,
    make_config,
    make_layer,
    qkv,
)
from tests.checkpoints.attention.softmax_family_cases import assert_close, run_chunks

BETA = torch.tensor([0.3, 0.8, 1.0, 1.4])


def _normalised(t, s, d, seed=0):
    q, k, v = qkv(t, s, d, seed=seed)
    # Make some keys similar to the queries so that scores pass the threshold.
    k = k + 0.8 * q[:, :1, :1].expand_as(k)
    return rms_normalize(q, None, 1e-6), rms_normalize(k, None, 1e-6), v


def test_reference_is_the_papers_formula():
    q, k, v = qkv(12, 12, 16, hq=2, hkv=2, seed=2)
    k = k + q  # diagonal scores near 1
    qn, kn = rms_normalize(q, None, 1e-6), rms_normalize(k, None, 1e-6)
    beta = torch.tensor([1.0, 0.5])
    _, w = tra_reference(qn, kn, v, 0, beta, p=2.0)
    cos = torch.nn.functional.cosine_similarity(q[:, :, :, None], k[:, :, None], dim=-1)
    i = torch.arange(12.0)
    tau = beta[:, None] * torch.sqrt(2 * torch.log(i + 1) / 16)  # 0 at position 0
    want = torch.relu(cos - tau[None, :, :, None]).pow(2) * causal_mask(12, 12, 0, q.device)
    torch.testing.assert_close(w, want, rtol=1e-5, atol=1e-6)
    assert w.sum(-1).max() > 0 and (w == 0).any()


TRA_CASES = [(2.0, t, s, d) for t, s in SHAPES + [(300, 300)] for d in (32, 64)]
TRA_CASES += [(p, t, s, 32) for p in (1.0, 1.5) for t, s in SHAPES]


@pytest.mark.parametrize("p,t,s,d", TRA_CASES)
def test_tra_chunked_matches_reference(p, t, s, d):
    q, k, v = _normalised(t, s, d, seed=t + d)
    ref, w = tra_reference(q, k, v, s - t, BETA, p)
    out = torch.full_like(ref, float("nan"))
    _, st = threshold_chunked([q], [k], v, s - t, BETA, p, block=32, collect_stats=True, layer=2, out=out)
    assert_close(out, ref)
    assert_stats_close(st, stats_from_weights(w, causal_mask(t, s, s - t, q.device), 2))


@pytest.mark.parametrize("t,s", SHAPES + [(300, 300)])
@pytest.mark.parametrize("d", [32, 64])
def test_tda_chunked_matches_reference(t, s, d):
    q1, k1, v = _normalised(t, s, d, seed=t)
    q2, k2, _ = _normalised(t, s, d, seed=t + 100)
    ref, w = tda_reference(q1, k1, q2, k2, v, s - t, BETA, 0.6, 2.0)
    if t > 1:
        assert (w < 0).any() and (w > 0).any()
    out = torch.full_like(ref, float("nan"))
    _, st = threshold_chunked([q1, q2], [k1, k2], v, s - t, BETA, 2.0, 0.6, block=32, collect_stats=True,
                              out=out)
    assert_close(out, ref)
    assert_stats_close(st, stats_from_weights(w, causal_mask(t, s, s - t, q1.device), 0))


def test_tda_is_tra_minus_lambda_tra():
    q1, k1, v = _normalised(20, 20, 32, seed=1)
    q2, k2, _ = _normalised(20, 20, 32, seed=2)
    a, _ = tra_reference(q1, k1, v, 0, BETA)
    b, _ = tra_reference(q2, k2, v, 0, BETA)
    out, _ = tda_reference(q1, k1, q2, k2, v, 0, BETA, 0.25)
    torch.testing.assert_close(out, a - 0.25 * b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("variant", ["tra", "tda"])
@pytest.mark.parametrize("params", [{}, {"beta_per_head": True, "learn_gain": True, "p": 1.0}])
def test_layer_chunked_prefill_and_decode_match_one_reference_prefill(variant, params):
    config = make_config(variant, params=params)
    layer = make_layer(config)
    x = torch.randn(1, 70, 64, generator=torch.Generator().manual_seed(5))
    ref, ref_stats = run_chunks(layer, config, x, [70], "reference", collect_stats=True)
    got, stats = run_chunks(layer, config, x, [40, 27, 1, 1, 1], "torch", block=16, collect_stats=True)
    assert_close(got, ref)
    cat = torch.cat([s.zeros for s in stats], dim=2)
    assert torch.equal(cat, ref_stats[0].zeros)
    assert cat.sum() > 0  # the threshold silences some keys


def test_tda_lambda_is_clamped_and_parameters_are_named():
    layer = make_layer(make_config("tda", params={"beta_per_head": True, "learn_gain": True}))
    names = {n for n, _ in layer.named_parameters()}
    assert {"beta", "lam", "q2_proj.weight", "k2_proj.weight", "q_gain", "k_gain", "q2_gain", "k2_gain"} <= names
    assert layer.beta.shape == (4,)
    with torch.no_grad():
        layer.lam.fill_(1.7)
    assert float(layer.lam_value().detach()) == 1.0
    with torch.no_grad():
        layer.lam.fill_(-0.3)
    assert float(layer.lam_value().detach()) == 0.0


def test_position_zero_has_no_threshold():
    q, _, v = _normalised(1, 1, 32)
    k = q[:, :1]  # the key equals the query: cosine 1
    out, w = tra_reference(q[:, :1], k, v, 0, torch.tensor([5.0]))
    torch.testing.assert_close(w[..., 0, 0], torch.ones(1, 1), rtol=1e-5, atol=1e-5)  # tau_0 = 0 for any beta
    _, w1 = tra_reference(torch.cat([q[:, :1]] * 2, 2), k.expand(1, 1, 2, 32), v.expand(1, 1, 2, 32), 0,
                          torch.tensor([5.0]))
    assert (w1[0, 0, 1] == 0).all()  # at position 1, tau = 5 sqrt(2 ln 2 / 32) > 1: silenced
    assert math.isfinite(float(out.sum()))


def test_unsupported_configs_are_refused():
    with pytest.raises(ConfigError, match="ALiBi"):
        make_layer(make_config("tra", position="alibi"))
    with pytest.raises(ConfigError, match="p must be positive"):
        make_layer(make_config("tra", params={"p": 0}))
