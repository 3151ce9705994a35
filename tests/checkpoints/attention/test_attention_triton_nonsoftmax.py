"""Triton kernels of the non-softmax variants against their dense references:
fp32, through the interpreter on CPU (TRITON_INTERPRET=1 is set in
tests/conftest.py before triton is imported) or compiled on a GPU. Outputs
start as NaN so a missed write fails; statistics are compared with those of
the reference weights. Small shapes, one batch, few heads."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="triton is not installed: the Triton backend cannot be tested")

from checkpoints.attention import triton_common as common  # noqa: E402
from checkpoints.attention.entmax import triton as te  # noqa: E402
from checkpoints.attention.entmax.reference import entmax_reference  # noqa: E402
from checkpoints.attention.masks import causal_mask  # noqa: E402
from checkpoints.attention.pointwise import triton as tp  # noqa: E402
from checkpoints.attention.pointwise.reference import rela_reference, tda_reference, tra_reference  # noqa: E402
from checkpoints.attention.pointwise.threshold import rms_normalize  # noqa: E402
from checkpoints.attention.softpick import triton as ts  # noqa: E402
from checkpoints.attention.softpick.reference import softpick_reference  # noqa: E402
from checkpoints.attention.stats import stats_from_weights  # noqa: E402
from tests.checkpoints.attention.nonsoftmax_cases import (  # noqa: E402
    SHAPES,
    assert_stats_close,
    make_config,
    make_layer,
    qkv,
)
from tests.checkpoints.attention.softmax_family_cases import assert_close, run_chunks  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and not common.INTERPRET:
    pytest.skip("no GPU and TRITON_INTERPRET is not 1", allow_module_level=True)

# Every shape at d = 32; d = 64 on a full prefill, a decode row and N = 1 (interpreter time).
CASES = [(t, s, 32) for t, s in SHAPES] + [(1, 1, 64), (130, 130, 64), (1, 130, 64), (260, 260, 32)]
BETA = torch.tensor([0.3, 0.8, 1.0, 1.4])


def _check(out, stats, ref, w, t, s):
    assert_close(out, ref)
    assert_stats_close(stats, stats_from_weights(w, causal_mask(t, s, s - t, out.device), 1))


@pytest.mark.parametrize("t,s,d", CASES)
def test_softpick(t, s, d):
    q, k, v = qkv(t, s, d, seed=t + d, device=DEVICE, scale=1.5)
    ref, w = softpick_reference(q, k, v, s - t)
    out = torch.full_like(ref, float("nan"))
    _, st = ts.softpick_attention(q, k, v, s - t, collect_stats=True, layer=1, out=out)
    _check(out, st, ref, w, t, s)


@pytest.mark.parametrize("t,s,d", [(63, 63, 32), (70, 130, 32), (1, 130, 32)])
def test_rectified_softmax(t, s, d):
    q, k, v = qkv(t, s, d, seed=t + d + 1, device=DEVICE, scale=1.5)
    ref, w = softpick_reference(q, k, v, s - t, denominator="exp")
    out = torch.full_like(ref, float("nan"))
    _, st = ts.softpick_attention(q, k, v, s - t, denominator="exp", collect_stats=True, layer=1, out=out)
    _check(out, st, ref, w, t, s)
    out = torch.full_like(ref, float("nan"))
    if t == 1:  # decode partials merge with softmax's denominator too
        ts.softpick_attention(q, k, v, s - t, denominator="exp", splits=3, out=out)
        assert_close(out, ref)


@pytest.mark.parametrize("t,s,d", CASES)
def test_rela(t, s, d):
    q, k, v = qkv(t, s, d, seed=t + d, device=DEVICE)
    ref, w = rela_reference(q, k, v, s - t)
    out = torch.full_like(ref, float("nan"))
    _, st = tp.rela_attention(q, k, v, s - t, collect_stats=True, layer=1, out=out)
    _check(out, st, ref, w, t, s)


@pytest.mark.parametrize("t,s,d", CASES)
def test_entmax15(t, s, d):
    q, k, v = qkv(t, s, d, seed=t + d, device=DEVICE, scale=1.5)
    ref, w = entmax_reference(q, k, v, s - t, 1.5)
    out = torch.full_like(ref, float("nan"))
    _, st = te.entmax_attention(q, k, v, s - t, 1.5, collect_stats=True, layer=1, out=out)
    _check(out, st, ref, w, t, s)


@pytest.mark.parametrize("position", ["alibi", "nape"])
@pytest.mark.parametrize("t,s", [(70, 130), (1, 130)])
def test_entmax_with_alibi_slopes(position, t, s):
    from checkpoints.attention.position import alibi_slopes

    slopes = alibi_slopes(4, position)
    q, k, v = qkv(t, s, 32, seed=t + 2, device=DEVICE, scale=1.5)
    ref, w = entmax_reference(q, k, v, s - t, 1.5, slopes=slopes)
    out = torch.full_like(ref, float("nan"))
    _, st = te.entmax_attention(q, k, v, s - t, 1.5, slopes=slopes, collect_stats=True, layer=1, out=out)
    _check(out, st, ref, w, t, s)


@pytest.mark.parametrize("alpha", [2.0, 1.25])
@pytest.mark.parametrize("t,s", [(70, 130), (1, 130)])
def test_sparsemax_and_other_alphas(alpha, t, s):
    q, k, v = qkv(t, s, 32, seed=t, device=DEVICE, scale=1.5)
    ref, w = entmax_reference(q, k, v, s - t, alpha)
    out = torch.full_like(ref, float("nan"))
    _, st = te.entmax_attention(q, k, v, s - t, alpha, collect_stats=True, layer=1, out=out)
    _check(out, st, ref, w, t, s)


def _normalised(t, s, d, seed):
    q, k, v = qkv(t, s, d, seed=seed, device=DEVICE)
    k = k + 0.8 * q[:, :1, :1].expand_as(k)  # some scores pass the threshold
    return rms_normalize(q, None, 1e-6), rms_normalize(k, None, 1e-6), v


@pytest.mark.parametrize("t,s,d", CASES)
def test_tra_and_tda(t, s, d):
    q1, k1, v = _normalised(t, s, d, seed=t)
    q2, k2, _ = _normalised(t, s, d, seed=t + 7)
    beta = BETA.to(DEVICE)
    ref, w = tra_reference(q1, k1, v, s - t, beta, 1.5)
    out = torch.full_like(ref, float("nan"))
    _, st = tp.threshold_attention([q1], [k1], v, s - t, beta, 1.5, collect_stats=True, layer=1, out=out)
    _check(out, st, ref, w, t, s)
    ref, w = tda_reference(q1, k1, q2, k2, v, s - t, beta, 0.6, 2.0)
    out = torch.full_like(ref, float("nan"))
    _, st = tp.threshold_attention([q1, q2], [k1, k2], v, s - t, beta, 2.0, 0.6, collect_stats=True, layer=1,
                                   out=out)
    _check(out, st, ref, w, t, s)


@pytest.mark.parametrize("s", [1, 130, 300])
def test_decode_with_key_splits(s):
    """Decode partials (several key ranges per row) merge to the reference."""
    q, k, v = qkv(1, s, 32, seed=s, device=DEVICE, scale=1.5)
    ref, _ = softpick_reference(q, k, v, s - 1)
    out = torch.full_like(ref, float("nan"))
    ts.softpick_attention(q, k, v, s - 1, splits=3, out=out)
    assert_close(out, ref)
    qn, kn = rms_normalize(q, None, 1e-6), rms_normalize(k + q[:, :1], None, 1e-6)
    ref, _ = tra_reference(qn, kn, v, s - 1, BETA.to(DEVICE), 2.0)
    out = torch.full_like(ref, float("nan"))
    tp.threshold_attention([qn], [kn], v, s - 1, BETA.to(DEVICE), 2.0, splits=3, out=out)
    assert_close(out, ref)


@pytest.mark.parametrize("variant,params,position", [
    ("softpick", {}, "rope"), ("scalable_softpick", {"s_init": 0.7}, "rope"), ("rectified_softmax", {}, "nope"),
    ("tda", {"learn_gain": True}, "rope"), ("rela", {}, "rope"),
    ("entmax", {"length_scaling": True}, "rope"), ("entmax", {"alpha": 2.0}, "nape")])
def test_layer_prefill_in_chunks_and_decode(variant, params, position):
    config = make_config(variant, head_dim=32, params=params, position=position)
    layer = make_layer(config).to(DEVICE)
    x = torch.randn(1, 70, 64, generator=torch.Generator().manual_seed(5)).to(DEVICE)
    ref, _ = run_chunks(layer, config, x, [70], "reference")
    got, stats = run_chunks(layer, config, x, [40, 27, 1, 1, 1], "triton", collect_stats=True)
    assert_close(got, ref)
    assert [s.visible.shape[2] for s in stats] == [40, 27, 1, 1, 1]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision(dtype):
    """Relative RMS error < 0.005 against the fp32 reference on the same
    (rounded) inputs: the kernels' own error. Rounding q and k to bf16 alone
    moves sparse weights by about as much (entmax: ~0.0047 on these inputs).
    The interpreter has no bf16 arithmetic: on CPU only fp16 runs."""
    if DEVICE == "cpu" and dtype == torch.bfloat16:
        pytest.skip("the Triton interpreter computes bf16 incorrectly; bf16 is checked on a GPU")
    n = 300 if DEVICE == "cuda" else 64
    q, k, v = (x.to(dtype) for x in qkv(n, n, 64, seed=3, device=DEVICE))
    qn, kn = rms_normalize(q, None, 1e-6), rms_normalize(k + q[:, :1], None, 1e-6)
    beta = BETA.to(DEVICE)
    f32 = lambda *xs: [x.float() for x in xs]  # noqa: E731
    pairs = [
        (softpick_reference(*f32(q, k, v), 0)[0], ts.softpick_attention(q, k, v, 0)[0]),
        (rela_reference(*f32(q, k, v), 0)[0], tp.rela_attention(q, k, v, 0)[0]),
        (entmax_reference(*f32(q, k, v), 0)[0], te.entmax_attention(q, k, v, 0)[0]),
        (tra_reference(*f32(qn, kn, v), 0, beta, 2.0)[0], tp.threshold_attention([qn], [kn], v, 0, beta, 2.0)[0]),
    ]
    for ref, out in pairs:
        assert out.dtype == dtype
        rel = ((out.float() - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()
        assert rel < 0.005


def test_silent_rows_output_exactly_zero():
    """Rows where no key survives (all scores <= 0 for softpick and rela, every
    cosine below tau for tra) give exact zeros and zero statistics, not NaN."""
    q, k, v = qkv(40, 40, 32, seed=9, device=DEVICE)
    q, k = q.abs(), -k.abs()  # every score negative
    for out, st in (ts.softpick_attention(q, k, v, 0, collect_stats=True),
                    tp.rela_attention(q, k, v, 0, collect_stats=True)):
        assert (out == 0).all()
        assert (st.abs_sum == 0).all() and (st.entropy == 0).all() and torch.equal(st.zeros, st.visible)
    qn, kn = rms_normalize(q, None, 1e-6), rms_normalize(k.abs(), None, 1e-6)
    out, st = tp.threshold_attention([qn], [kn], v, 0, torch.full((4,), 50.0, device=DEVICE), 2.0,
                                     collect_stats=True)
    assert (out[:, :, 1:] == 0).all() and (out[:, :, 0] != 0).any()  # tau_0 = 0: position 0 keeps its key
    assert torch.equal(st.zeros[:, :, 1:], st.visible[:, :, 1:])
