"""Triton kernels for the variants whose weights are a pointwise function of
the scores, final as soon as a tile is computed, so one pass over the keys
gives the output and (optionally) the row statistics:

- rela (Zhang et al. 2021): `w = ReLU(q.k / sqrt(d))`;
- tra (Huang et al. 2026): `w = ReLU(qn.kn / d - tau_i)^p`,
  `tau_i = beta_h * sqrt(2 ln(i + 1) / d)` with i the ABSOLUTE query position,
  so the same kernel serves prefill chunks and single-token decode over a
  cache (the public TDA kernel has no decode path);
- tda: `w = w_tra(q1, k1) - lam * w_tra(q2, k2)` over one shared v.

Decode (one query token) packs the query heads of a kv group into the rows
and may split the keys across programs; the partial sums simply add.
Formulas in reference.py, the PyTorch twins in chunked.py. The file reads:
kernels, launcher (`pointwise_attention`), then the public functions
`rela_attention` and `threshold_attention`."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from checkpoints.attention import triton_common as tc
from checkpoints.attention.stats import RowStats

_KEY = ["D", "DV", "THRESHOLD", "TWO", "POW", "STATS", "PRECISION", "LEN_BUCKET"]


@triton.jit
def _tile_weights(q, q2, kt, k2t, tau, qk_scale, p, lam,
                  THRESHOLD: tl.constexpr, TWO: tl.constexpr, POW: tl.constexpr, PRECISION: tl.constexpr):
    z = tl.dot(q, kt, input_precision=PRECISION) * qk_scale
    if THRESHOLD:
        z = z - tau[:, None]
    w = tc.pow_r(tl.maximum(z, 0.0), p, POW)
    if TWO:
        z2 = tl.dot(q2, k2t, input_precision=PRECISION) * qk_scale - tau[:, None]
        w = w - lam * tc.pow_r(tl.maximum(z2, 0.0), p, POW)
    return w


@tc.jit_any_length
def _pointwise_kernel(
    Q, K, Q2, K2, V, O, Beta, AbsSum, Zeros, First, PlogP, Visible,
    sqb, sqh, sqt, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sob, soh, sot, sod, sos,
    Hq, GROUPS, T, S, q_offset, keys_per_split, qk_scale, inv_d, p, Lam, LEN_BUCKET,
    D: tl.constexpr, DV: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    THRESHOLD: tl.constexpr, TWO: tl.constexpr, POW: tl.constexpr, STATS: tl.constexpr,
    PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_m, b, hk, t, h, rmask = tc.group_program(Hq, GROUPS, T, BLOCK_M)
    split = tl.program_id(2)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q = tc.load_rows(Q, b, h, t, rmask, sqb, sqh, sqt, sqd, offs_d, D)
    q2 = q
    if TWO:
        q2 = tc.load_rows(Q2, b, h, t, rmask, sqb, sqh, sqt, sqd, offs_d, D)
    qpos = q_offset + t
    lam = 0.0
    if TWO:  # tda's lam, read here: a host read of it would synchronise every layer of every step
        lam = tl.load(Lam)
    tau = tl.zeros([BLOCK_M], tl.float32)
    if THRESHOLD:
        beta = tl.load(Beta + h, mask=rmask, other=0.0)
        tau = beta * tl.sqrt(2.0 * tl.log(qpos.to(tl.float32) + 1.0) * inv_d)
    lo, hi, full_hi = tc.key_bounds(pid_m, split, GROUPS, T, S, q_offset, keys_per_split, BLOCK_M, BLOCK_N)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    abs_sum, zeros, first, plogp, visible = tc.stats_init(BLOCK_M)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kt = tc.load_keys_t(K, b, hk, offs_n, hi, skb, skh, sks, skd, offs_d, D)
        k2t = kt
        if TWO:
            k2t = tc.load_keys_t(K2, b, hk, offs_n, hi, skb, skh, sks, skd, offs_d, D)
        w = _tile_weights(q, q2, kt, k2t, tau, qk_scale, p, lam, THRESHOLD, TWO, POW, PRECISION)
        vis = tc.visibility(offs_n, qpos, hi)
        if start_n + BLOCK_N > full_hi:  # the diagonal / ragged end: hide what the rows cannot see
            w = tl.where(vis, w, 0.0)
        vt = tc.load_values(V, b, hk, offs_n, hi, svb, svh, svs, svd, offs_dv, DV)
        acc += tl.dot(w.to(vt.dtype), vt, input_precision=PRECISION)
        if STATS:
            abs_sum, zeros, first, plogp, visible = tc.stats_update(w, vis, offs_n, abs_sum, zeros, first,
                                                                 plogp, visible)
    tc.store_rows(O + split * sos, acc, b, h, t, rmask, sob, soh, sot, sod, offs_dv, DV)
    if STATS:
        tc.stats_store(AbsSum, Zeros, First, PlogP, Visible, b, h, t, Hq, T, rmask, abs_sum, zeros, first, plogp, visible)


_prefill, _decode = tc.autotuned(_pointwise_kernel, _KEY)


def pointwise_attention(
    qs: list[torch.Tensor],
    ks: list[torch.Tensor],
    v: torch.Tensor,
    q_offset: int,
    *,
    threshold: bool,
    scale: float,
    beta: torch.Tensor | None = None,
    p: float = 1.0,
    lam: float | torch.Tensor = 0.0,
    collect_stats: bool = False,
    layer: int = 0,
    out: torch.Tensor | None = None,
    splits: int | None = None,
) -> tuple[torch.Tensor, RowStats | None]:
    """qs (B, Hq, T, D), ks (B, Hkv, S, D) (one pair, or two for tda), v (B, Hkv, S, Dv)
    -> (out (B, Hq, T, Dv) in q's dtype, RowStats or None). `out`, when given,
    is the output buffer. One query token (decode) may split the keys."""
    q, k = qs[0], ks[0]
    b, hq, t, d = q.shape
    hkv, s, dv = k.shape[1], k.shape[2], v.shape[-1]
    two = len(qs) == 2
    q2, k2 = (qs[1], ks[1]) if two else (q, k)
    q, q2 = tc.same_strides(q, q2)
    k, k2 = tc.same_strides(k, k2)
    out, bufs = tc.outputs(q, k, v, out, collect_stats)
    if t == 0:
        return out, (tc.stats_from_buffers(bufs, layer) if collect_stats else None)
    decode = t == 1
    splits = 1 if (collect_stats or not decode) else (splits or tc.decode_splits(b, hkv, s))
    per = tc.keys_per_split(s, splits)
    target = out if splits == 1 else torch.full((splits, b, hq, t, dv), float("nan"), device=q.device)
    sos = 0 if splits == 1 else target.stride(0)
    so = out.stride() if splits == 1 else target.stride()[1:]
    beta_t = (beta.detach().to(q.device, torch.float32).expand(hq).contiguous() if beta is not None
              else torch.zeros(hq, device=q.device))
    pw = float(p)
    lam_t = (lam.detach().to(q.device, torch.float32).reshape(1) if isinstance(lam, torch.Tensor)
             else torch.full((1,), float(lam), device=q.device))
    kernel = _decode if decode else _prefill
    grid = lambda meta: (triton.cdiv(t * (hq // hkv), meta["BLOCK_M"]), b * hkv, splits)  # noqa: E731
    kernel[grid](
        q, k, q2, k2, v, target, beta_t, *bufs,
        *q.stride(), *k.stride(), *v.stride(), *so, sos,
        hq, hq // hkv, t, s, q_offset, per, scale, 1.0 / d, pw, lam_t, tc.length_bucket(s),
        D=d, DV=dv, BLOCK_D=tc.pow2(d), BLOCK_DV=tc.pow2(dv), THRESHOLD=threshold, TWO=two,
        POW=tc.pow_code(pw), STATS=collect_stats, PRECISION=tc.precision(q.dtype),
    )
    if splits > 1:
        out.copy_(target.sum(0))
    return out, (tc.stats_from_buffers(bufs, layer) if collect_stats else None)


def threshold_attention(qs, ks, v, q_offset, beta, p=2.0, lam=0.0, *, collect_stats=False, layer=0, out=None,
                        splits=None):
    """TRA (one normalised q/k pair) or TDA (two pairs): see reference.py."""
    return pointwise_attention(qs, ks, v, q_offset, threshold=True, scale=1.0 / qs[0].shape[-1], beta=beta,
                               p=p, lam=lam, collect_stats=collect_stats, layer=layer, out=out, splits=splits)


def rela_attention(q, k, v, q_offset, *, collect_stats=False, layer=0, out=None, splits=None):
    """ReLA weights `ReLU(q.k / sqrt(d))`: see reference.py."""
    return pointwise_attention([q], [k], v, q_offset, threshold=False, scale=1.0 / math.sqrt(q.shape[-1]),
                               collect_stats=collect_stats, layer=layer, out=out, splits=splits)
