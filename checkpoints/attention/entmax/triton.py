"""Triton kernel of alpha-entmax attention (formulas in reference.py, the
tau search in chunked.py, its PyTorch twin; streaming after AdaSplash, Goncalves et al. 2025). One program owns
a block of grouped rows (triton_common.py) and makes, over the
keys it can see:

1. a pass for the row max of x = (alpha - 1) z;
2. Newton passes for tau from tau = max - n^{1-alpha} (the first step lands
   left of the root, then the iterates rise monotonically: f is convex and
   decreasing; the loop stops when every row's step is below a few ulps, or
   after MAX_ITERS passes);
3. the output pass `sum_j [x_j - tau]_+^r v_j`, with the row statistics in the
   same pass when asked.

Decode is the same kernel with the query heads of a kv group as the rows (no
key splits: tau needs every key of the row). The file reads: kernels,
launcher and public function `entmax_attention`."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from checkpoints.attention import triton_common as tc
from checkpoints.attention.entmax.chunked import NEWTON_MAX_ITERS, NEWTON_TOL
from checkpoints.attention.entmax.reference import check_alpha
from checkpoints.attention.stats import RowStats

_KEY = ["D", "DV", "POW", "STATS", "HAS_BIAS", "PRECISION", "LEN_BUCKET"]


@triton.jit
def _dpow(y, r, POW: tl.constexpr):
    """y^{r-1} with 0^0 := 0."""
    if POW == 1:
        return tl.where(y > 0, 1.0, 0.0)
    elif POW == 2:
        return y
    else:
        return tl.where(y > 0, tl.exp2((r - 1.0) * tl.log2(tl.where(y > 0, y, 1.0))), 0.0)


@triton.jit
def _tile(q, K, b, hk, offs_n, hi, qpos, skb, skh, sks, skd, offs_d, D, qk_scale, slope,
          HAS_BIAS: tl.constexpr, PRECISION: tl.constexpr):
    """x = (alpha - 1) (z + slope_h (j - i)) of one tile (slope already times alpha - 1)."""
    kt = tc.load_keys_t(K, b, hk, offs_n, hi, skb, skh, sks, skd, offs_d, D)
    x = tl.dot(q, kt, input_precision=PRECISION) * qk_scale
    if HAS_BIAS:
        x += slope[:, None] * (offs_n[None, :] - qpos[:, None]).to(tl.float32)
    return x, tc.visibility(offs_n, qpos, hi)


@tc.jit_any_length
def _entmax_kernel(
    Q, K, V, O, AbsSum, Zeros, First, PlogP, Visible, Slopes,
    sqb, sqh, sqt, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sob, soh, sot, sod,
    Hq, GROUPS, T, S, q_offset, qk_scale, bias_scale, r, tol, LEN_BUCKET,
    D: tl.constexpr, DV: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    POW: tl.constexpr, STATS: tl.constexpr, HAS_BIAS: tl.constexpr, MAX_ITERS: tl.constexpr,
    PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_m, b, hk, t, h, rmask = tc.group_program(Hq, GROUPS, T, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q = tc.load_rows(Q, b, h, t, rmask, sqb, sqh, sqt, sqd, offs_d, D)
    qpos = q_offset + t
    if HAS_BIAS:  # ALiBi / NAPE slope of each row's query head
        slope = tl.load(Slopes + h, mask=rmask, other=0.0) * bias_scale
    else:
        slope = tl.zeros([BLOCK_M], tl.float32)
    lo, hi, full_hi = tc.key_bounds(pid_m, 0, GROUPS, T, S, q_offset, S + 1, BLOCK_M, BLOCK_N)
    top = tl.full([BLOCK_M], float("-inf"), tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        x, vis = _tile(q, K, b, hk, offs_n, hi, qpos, skb, skh, sks, skd, offs_d, D, qk_scale, slope,
                        HAS_BIAS, PRECISION)
        top = tl.maximum(top, tl.max(tl.where(vis, x, float("-inf")), 1))
    seen = tl.minimum(qpos + 1, S).to(tl.float32)
    floor = tl.where(top > float("-inf"), top - 1.0, 0.0)
    tau = tl.where(top > float("-inf"), top - tl.exp2(-tl.log2(seen) / r), 0.0)  # n^{1-alpha}
    it = 0
    moving = 1
    while (it < MAX_ITERS) & (moving > 0):
        f = tl.zeros([BLOCK_M], tl.float32) - 1.0
        fp = tl.zeros([BLOCK_M], tl.float32)
        for start_n in range(lo, hi, BLOCK_N):
            offs_n = start_n + tl.arange(0, BLOCK_N)
            x, vis = _tile(q, K, b, hk, offs_n, hi, qpos, skb, skh, sks, skd, offs_d, D, qk_scale, slope,
                        HAS_BIAS, PRECISION)
            y = tl.where(vis, tl.maximum(x - tau[:, None], 0.0), 0.0)
            f += tl.sum(tc.pow_r(y, r, POW), 1)
            fp += tl.sum(_dpow(y, r, POW), 1)
        step = tl.where(fp > 0, f / (r * tl.where(fp > 0, fp, 1.0)), 0.0)
        tau = tl.maximum(tau + step, floor)
        # After the first (leftward) step the iterates only rise; a step that is not
        # clearly positive is rounding noise: the row has converged.
        big = (step > tol * tl.maximum(tl.abs(tau), 1.0)) | (it == 0)
        moving = tl.sum(tl.where(big & rmask, 1, 0), 0)
        it += 1
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    abs_sum, zeros, first, plogp, visible = tc.stats_init(BLOCK_M)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        x, vis = _tile(q, K, b, hk, offs_n, hi, qpos, skb, skh, sks, skd, offs_d, D, qk_scale, slope,
                        HAS_BIAS, PRECISION)
        w = tc.pow_r(tl.where(vis, tl.maximum(x - tau[:, None], 0.0), 0.0), r, POW)
        vt = tc.load_values(V, b, hk, offs_n, hi, svb, svh, svs, svd, offs_dv, DV)
        acc += tl.dot(w.to(vt.dtype), vt, input_precision=PRECISION)
        if STATS:
            abs_sum, zeros, first, plogp, visible = tc.stats_update(w, vis, offs_n, abs_sum, zeros, first,
                                                                 plogp, visible)
    tc.store_rows(O, acc, b, h, t, rmask, sob, soh, sot, sod, offs_dv, DV)
    if STATS:
        tc.stats_store(AbsSum, Zeros, First, PlogP, Visible, b, h, t, Hq, T, rmask, abs_sum, zeros, first, plogp, visible)


_prefill, _decode = tc.autotuned(_entmax_kernel, _KEY)


def entmax_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_offset: int,
    alpha: float = 1.5,
    *,
    slopes: torch.Tensor | None = None,
    collect_stats: bool = False,
    layer: int = 0,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, RowStats | None]:
    """q (B, Hq, T, D) (already length-scaled for ASEntmax), k (B, Hkv, S, D),
    v (B, Hkv, S, Dv), optional ALiBi/NAPE slopes (Hq,) added to the scores
    -> (out (B, Hq, T, Dv) in q's dtype, RowStats or None)."""
    alpha = check_alpha(alpha)
    r = 1.0 / (alpha - 1.0)
    b, hq, t, d = q.shape
    hkv, s, dv = k.shape[1], k.shape[2], v.shape[-1]
    out, bufs = tc.outputs(q, k, v, out, collect_stats)
    if t == 0:
        return out, (tc.stats_from_buffers(bufs, layer) if collect_stats else None)
    kernel = _decode if t == 1 else _prefill
    slopes_arg = out if slopes is None else slopes.to(device=q.device, dtype=torch.float32).contiguous()
    grid = lambda meta: (triton.cdiv(t * (hq // hkv), meta["BLOCK_M"]), b * hkv)  # noqa: E731
    kernel[grid](
        q, k, v, out, *bufs, slopes_arg, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        hq, hq // hkv, t, s, q_offset, (alpha - 1.0) / math.sqrt(d), alpha - 1.0, r, NEWTON_TOL, tc.length_bucket(s),
        D=d, DV=dv, BLOCK_D=tc.pow2(d), BLOCK_DV=tc.pow2(dv), POW=tc.pow_code(r),
        STATS=collect_stats, HAS_BIAS=slopes is not None, MAX_ITERS=NEWTON_MAX_ITERS, PRECISION=tc.precision(q.dtype),
    )
    return out, (tc.stats_from_buffers(bufs, layer) if collect_stats else None)
