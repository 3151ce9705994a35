"""Triton kernel of softpick attention (Zuhri et al. 2025; formulas in
reference.py, the PyTorch twin in chunked.py): online over key blocks like FlashAttention, with a running max
m that starts at 0 (see reference.py: weights are unchanged by clamping the
shift at 0), numerator accumulator and denominator `sum |e^{z-m} - e^{-m}|` (or
`sum e^{z-m}` for rectified-only softmax, EXP_DEN)
rescaled by `e^{m_old - m_new}`; base-2 exponentials throughout.

Prefill and decode are one kernel over the grouped row layout of
triton_common.py; decode may split the keys, each split writing
(acc, m, den) partials that the launcher merges. Statistics re-stream the
keys inside the same program once the row's final (m, den) are known.

The file reads: kernels, launcher and public function `softpick_attention`."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from checkpoints.attention import triton_common as tc
from checkpoints.attention.stats import RowStats

_KEY = ["D", "DV", "PARTIAL", "STATS", "PRECISION", "EXP_DEN", "LEN_BUCKET"]


@triton.jit
def _scores(q, K, b, hk, offs_n, hi, qpos, skb, skh, sks, skd, offs_d, D, qk_scale, PRECISION: tl.constexpr):
    """(z, vis): the tile's scores in base-2 units and which keys each row sees."""
    kt = tc.load_keys_t(K, b, hk, offs_n, hi, skb, skh, sks, skd, offs_d, D)
    z = tl.dot(q, kt, input_precision=PRECISION) * qk_scale
    vis = tc.visibility(offs_n, qpos, hi)
    return z, vis


@tc.jit_any_length
def _softpick_kernel(
    Q, K, V, O, M, L, AbsSum, Zeros, First, PlogP, Visible,
    sqb, sqh, sqt, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sob, soh, sot, sod, sos,
    Hq, GROUPS, T, S, q_offset, keys_per_split, qk_scale, eps, LEN_BUCKET,
    D: tl.constexpr, DV: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    PARTIAL: tl.constexpr, STATS: tl.constexpr, PRECISION: tl.constexpr, EXP_DEN: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_m, b, hk, t, h, rmask = tc.group_program(Hq, GROUPS, T, BLOCK_M)
    split = tl.program_id(2)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q = tc.load_rows(Q, b, h, t, rmask, sqb, sqh, sqt, sqd, offs_d, D)
    qpos = q_offset + t
    lo, hi, full_hi = tc.key_bounds(pid_m, split, GROUPS, T, S, q_offset, keys_per_split, BLOCK_M, BLOCK_N)
    m = tl.zeros([BLOCK_M], tl.float32)
    den = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        z, vis = _scores(q, K, b, hk, offs_n, hi, qpos, skb, skh, sks, skd, offs_d, D, qk_scale, PRECISION)
        m_new = tl.maximum(m, tl.max(tl.where(vis, z, float("-inf")), 1))
        alpha = tl.exp2(m - m_new)
        e = tl.where(vis, tl.exp2(z - m_new[:, None]) - tl.exp2(-m_new)[:, None], 0.0)
        if EXP_DEN:  # rectified-only softmax: softmax's denominator
            den = den * alpha + tl.sum(tl.where(vis, tl.exp2(z - m_new[:, None]), 0.0), 1)
        else:
            den = den * alpha + tl.sum(tl.abs(e), 1)
        vt = tc.load_values(V, b, hk, offs_n, hi, svb, svh, svs, svd, offs_dv, DV)
        acc = acc * alpha[:, None] + tl.dot(tl.maximum(e, 0.0).to(vt.dtype), vt, input_precision=PRECISION)
        m = m_new
    if PARTIAL:  # fp32 partials (acc, m, den) for the launcher to merge
        prow = (split * (tl.num_programs(1) * GROUPS) + b * Hq + h) * T + t
        tc.store_rows(O + split * sos, acc, b, h, t, rmask, sob, soh, sot, sod, offs_dv, DV)
        tl.store(M + prow, m, mask=rmask)
        tl.store(L + prow, den, mask=rmask)
    else:
        norm = den + eps
        tc.store_rows(O + split * sos, acc / norm[:, None], b, h, t, rmask, sob, soh, sot, sod, offs_dv, DV)
        if STATS:
            abs_sum, zeros, first, plogp, visible = tc.stats_init(BLOCK_M)
            for start_n in range(lo, hi, BLOCK_N):
                offs_n = start_n + tl.arange(0, BLOCK_N)
                z, vis = _scores(q, K, b, hk, offs_n, hi, qpos, skb, skh, sks, skd, offs_d, D, qk_scale,
                                  PRECISION)
                e = tl.exp2(z - m[:, None]) - tl.exp2(-m)[:, None]
                w = tl.where(vis, tl.maximum(e, 0.0), 0.0) / norm[:, None]
                abs_sum, zeros, first, plogp, visible = tc.stats_update(w, vis, offs_n, abs_sum, zeros, first,
                                                                     plogp, visible)
            tc.stats_store(AbsSum, Zeros, First, PlogP, Visible, b, h, t, Hq, T, rmask, abs_sum, zeros, first, plogp,
                        visible)


_prefill, _decode = tc.autotuned(_softpick_kernel, _KEY)


def softpick_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_offset: int,
    *,
    eps: float = 1e-6,
    denominator: str = "abs",
    collect_stats: bool = False,
    layer: int = 0,
    out: torch.Tensor | None = None,
    splits: int | None = None,
) -> tuple[torch.Tensor, RowStats | None]:
    """q (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, Dv) -> (out in q's dtype,
    RowStats or None). One query token (decode) may split the keys. `denominator` "exp":
    rectified-only softmax (reference.py)."""
    b, hq, t, d = q.shape
    hkv, s, dv = k.shape[1], k.shape[2], v.shape[-1]
    out, bufs = tc.outputs(q, k, v, out, collect_stats)
    if t == 0:
        return out, (tc.stats_from_buffers(bufs, layer) if collect_stats else None)
    decode = t == 1
    splits = 1 if (collect_stats or not decode) else (splits or tc.decode_splits(b, hkv, s))
    partial = splits > 1
    per = tc.keys_per_split(s, splits)
    if partial:
        target = torch.full((splits, b, hq, t, dv), float("nan"), device=q.device)
        m = torch.full((splits, b, hq, t), float("nan"), device=q.device)
        den = torch.full_like(m, float("nan"))
        so, sos = target.stride()[1:], target.stride(0)
    else:
        target, m, den, so, sos = out, out, out, out.stride(), 0
    kernel = _decode if decode else _prefill
    grid = lambda meta: (triton.cdiv(t * (hq // hkv), meta["BLOCK_M"]), b * hkv, splits)  # noqa: E731
    kernel[grid](
        q, k, v, target, m, den, *bufs,
        *q.stride(), *k.stride(), *v.stride(), *so, sos,
        hq, hq // hkv, t, s, q_offset, per, tc.LOG2E / math.sqrt(d), float(eps), tc.length_bucket(s),
        D=d, DV=dv, BLOCK_D=tc.pow2(d), BLOCK_DV=tc.pow2(dv), PARTIAL=partial, STATS=collect_stats,
        PRECISION=tc.precision(q.dtype), EXP_DEN=denominator == "exp",
    )
    if partial:
        m_all = m.amax(0)
        r = torch.exp2(m - m_all)
        norm = (den * r).sum(0) + eps
        out.copy_((target * r[..., None]).sum(0) / norm[..., None])
    return out, (tc.stats_from_buffers(bufs, layer) if collect_stats else None)
