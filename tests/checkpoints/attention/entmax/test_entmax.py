"""alpha-entmax attention: the dense reference against the `entmax` package
(entmax15, sparsemax, entmax_bisect), the streaming path against the
reference (outputs and row statistics), ASEntmax length scaling, and a layer
run in chunks over a KV cache."""

from __future__ import annotations

import math

import pytest
import torch

entmax_pkg = pytest.importorskip("entmax", reason="the entmax package is the oracle for these tests")

from checkpoints.attention.entmax.chunked import entmax_chunked  # noqa: E402
from checkpoints.attention.entmax.reference import entmax_reference, length_scale  # noqa: E402
from checkpoints.attention.masks import causal_mask  # noqa: E402
from checkpoints.attention.stats import stats_from_weights  # noqa: E402
from checkpoints.errors import ConfigError  # noqa: E402
from tests.checkpoints.attention.nonsoftmax_cases import (  # noqa: E402
    SHAPES,
    assert_stats_close,
    make_config,
    make_layer,
    qkv,
)
from tests.checkpoints.attention.softmax_family_cases import assert_close, run_chunks  # noqa: E402


def _package(z: torch.Tensor, alpha: float) -> torch.Tensor:
    if alpha == 1.5:
        return entmax_pkg.entmax15(z, dim=-1)
    if alpha == 2.0:
        return entmax_pkg.sparsemax(z, dim=-1)
    return entmax_pkg.entmax_bisect(z, alpha, dim=-1)


def _scores(q, k, t, s):
    z = (q.float() @ k.float().repeat_interleave(q.shape[1] // k.shape[1], 1).transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return z.masked_fill(~causal_mask(t, s, s - t, q.device), float("-inf"))


@pytest.mark.parametrize("alpha,t,s", [(1.5, 63, 63), (1.5, 70, 130), (2.0, 63, 63), (2.0, 70, 130), (1.3, 70, 130),
                                       (1.75, 63, 63)])
def test_reference_matches_the_entmax_package(alpha, t, s):
    q, k, v = qkv(t, s, 32, seed=t, scale=1.5)
    _, w = entmax_reference(q, k, v, s - t, alpha)
    want = _package(_scores(q, k, t, s), alpha)
    assert (w - want).abs().max() <= 1e-5
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)), rtol=0, atol=1e-5)
    assert (w == 0).any()  # sparse


CHUNKED_CASES = [(1.5, t, s, d) for t, s in SHAPES for d in (32, 64)]
CHUNKED_CASES += [(a, t, s, 32) for a in (2.0, 1.25) for t, s in SHAPES]


@pytest.mark.parametrize("alpha,t,s,d", CHUNKED_CASES + [(1.5, 300, 300, 32), (2.0, 300, 300, 64)])
def test_chunked_matches_reference(alpha, t, s, d):
    q, k, v = qkv(t, s, d, seed=t + d, scale=1.5)
    ref, w = entmax_reference(q, k, v, s - t, alpha)
    out = torch.full_like(ref, float("nan"))
    block = 32 if t < 300 else 128
    _, st = entmax_chunked(q, k, v, s - t, alpha, block=block, collect_stats=True, layer=4, out=out)
    assert_close(out, ref)
    assert_stats_close(st, stats_from_weights(w, causal_mask(t, s, s - t, q.device), 4))


def test_length_scaling_is_asentmax():
    t = s = 40
    q, k, v = qkv(t, s, 32, seed=3)
    beta, gamma = torch.tensor([0.0, 0.3, 0.5, 1.0]), torch.tensor([1.0, 0.5, 2.0, 1.0])
    _, w = entmax_reference(q, k, v, 0, 1.5, beta, gamma)
    factor = 1 + beta[:, None] * torch.log(torch.arange(t) + 2.0)[None, :] ** gamma[:, None]
    torch.testing.assert_close(length_scale(torch.arange(t), beta, gamma), factor)
    want = entmax_pkg.entmax15(_scores(q, k, t, s) * factor[None, :, :, None], dim=-1)
    assert (w - want).abs().max() <= 1e-5
    ref, _ = entmax_reference(q[:, :, 25:], k, v, 25, 1.5, beta, gamma)
    got, _ = entmax_chunked(q[:, :, 25:], k, v, 25, 1.5, as_beta=beta, as_gamma=gamma, block=16)
    assert_close(got, ref)  # the factor follows the absolute position


@pytest.mark.parametrize("alpha", [1.0, 0.5, 2.5])
def test_alpha_outside_the_range_is_refused(alpha):
    with pytest.raises(ConfigError, match=r"alpha must be in \(1, 2\]"):
        make_layer(make_config("entmax", params={"alpha": alpha}))


@pytest.mark.parametrize("params", [{}, {"alpha": 2.0, "length_scaling": True}])
def test_layer_chunked_prefill_and_decode_match_one_reference_prefill(params):
    config = make_config("entmax", params=params)
    layer = make_layer(config)
    if params.get("length_scaling"):
        assert {"as_beta", "as_gamma"} <= {n for n, _ in layer.named_parameters()}
    x = torch.randn(1, 70, 64, generator=torch.Generator().manual_seed(5))
    ref, ref_stats = run_chunks(layer, config, x, [70], "reference", collect_stats=True)
    got, stats = run_chunks(layer, config, x, [40, 27, 1, 1, 1], "torch", block=16, collect_stats=True)
    assert_close(got, ref)
    abs_sum = torch.cat([s.abs_sum for s in stats], dim=2)
    torch.testing.assert_close(abs_sum, torch.ones_like(abs_sum), rtol=0, atol=1e-5)
    assert torch.equal(torch.cat([s.zeros for s in stats], dim=2), ref_stats[0].zeros)


@pytest.mark.parametrize("alpha", [1.5, 2.0, 1.3])
def test_gradients_match_the_entmax_package(alpha):
    """Training uses the reference and streaming paths: their gradients with
    respect to q equal those through the package's entmax."""
    g = torch.Generator().manual_seed(0)
    q0, k, v = (torch.randn(1, 2, 6, 8, generator=g) for _ in range(3))
    grad_out = torch.randn(1, 2, 6, 8, generator=g)
    grads = []
    for fn in ("package", "reference", "chunked"):
        q = q0.clone().requires_grad_()
        if fn == "package":
            out = _package(_scores(q, k, 6, 6), alpha) @ v
        elif fn == "reference":
            out, _ = entmax_reference(q, k, v, 0, alpha)
        else:
            out, _ = entmax_chunked(q, k, v, 0, alpha, block=4)
        (out * grad_out).sum().backward()
        grads.append(q.grad)
    assert (grads[1] - grads[0]).abs().max() <= 1e-5
    assert (grads[2] - grads[0]).abs().max() <= 1e-5


@pytest.mark.parametrize("alpha,t,s", [(1.5, 70, 130), (2.0, 130, 130), (1.25, 1, 130)])
def test_chunked_recomputing_scores_matches_reference(alpha, t, s, monkeypatch):
    """Long rows do not keep their scores between Newton passes: recompute path."""
    import checkpoints.attention.entmax.chunked as entmax_module

    monkeypatch.setattr(entmax_module, "KEEP_SCORES_BYTES", 0)
    q, k, v = qkv(t, s, 32, seed=t, scale=1.5)
    ref, w = entmax_reference(q, k, v, s - t, alpha)
    out = torch.full_like(ref, float("nan"))
    _, st = entmax_chunked(q, k, v, s - t, alpha, block=32, collect_stats=True, out=out)
    assert_close(out, ref)
    assert_stats_close(st, stats_from_weights(w, causal_mask(t, s, s - t, q.device), 0))


@pytest.mark.parametrize("position", ["alibi", "nape"])
@pytest.mark.parametrize("alpha,t,s", [(1.5, 70, 130), (2.0, 1, 130)])
def test_alibi_and_nape_bias_the_scores(position, alpha, t, s):
    """ASEntmax's paper pairs entmax with NAPE: the bias slope_h (j - i) is added
    to z; the package on the biased scores is the oracle."""
    from checkpoints.attention.position import alibi_bias, alibi_slopes

    slopes = alibi_slopes(4, position)
    q, k, v = qkv(t, s, 32, seed=t + 1, scale=1.5)
    ref, w = entmax_reference(q, k, v, s - t, alpha, slopes=slopes)
    want = _package(_scores(q, k, t, s) + alibi_bias(slopes, t, s, s - t), alpha)
    assert (w - want).abs().max() <= 1e-5
    out = torch.full_like(ref, float("nan"))
    _, st = entmax_chunked(q, k, v, s - t, alpha, block=32, collect_stats=True, out=out, slopes=slopes)
    assert_close(out, ref)
    assert_stats_close(st, stats_from_weights(w, causal_mask(t, s, s - t, q.device), 0))


def test_layer_with_nape_in_chunks_and_decode():
    config = make_config("entmax", params={"length_scaling": True}, position="nape")
    layer = make_layer(config)
    x = torch.randn(1, 70, 64, generator=torch.Generator().manual_seed(6))
    ref, _ = run_chunks(layer, config, x, [70], "reference")
    got, _ = run_chunks(layer, config, x, [40, 27, 1, 1, 1], "torch", block=16)
    assert_close(got, ref)
    rope, _ = run_chunks(make_layer(make_config("entmax", params={"length_scaling": True})),
                         make_config("entmax", params={"length_scaling": True}), x, [70], "reference")
    assert not torch.allclose(rope, ref)  # the position option is in effect
