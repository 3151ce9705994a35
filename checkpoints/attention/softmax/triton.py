"""Triton kernels of the online-softmax family (softmax, ssmax, gated, cog,
intg, and diff as two softmaxes; formulas in reference.py, the PyTorch twin
in chunked.py): a fused causal prefill kernel
(FlashAttention-2 tiling, Dao 2023), a split-key single-token decode kernel
over the KV cache (flash-decoding), and a statistics kernel that re-streams
the keys with the final row normalisers.

A row's logits are `a = scale * q.k + slope_h * (j - i)` (or `|scale * q.k| +
slope_h * (j - i)` with weights multiplied by `sign(q.k)` for the signed
form, cog), with `scale * q.k` softcapped to `c tanh(scale * q.k / c)` first
when a softcap c is given (Gemma 2); kernels work in base 2 (`exp2`, logits
times log2(e), the softcap too). Rows with
no visible key output exactly zero. Inputs may be strided (views are fine).

Under `TRITON_INTERPRET=1` (CPU tests) a single configuration with large
tiles is used; on CUDA a few configurations are autotuned.

The decode kernel has a paged twin (`decode_paged`: the keys and values read through
a block table from the paged pool of `checkpoints.kv`, vLLM's paged attention).

The file reads: kernels, launchers (`prefill`, `decode`, `decode_paged`, `attention`,
`row_stats`), then the family's public function `family_attention`, the twin
of `chunked.family_attention`."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from checkpoints.attention import triton_common as tc
from checkpoints.attention.softmax.chunked import Term, run_terms
from checkpoints.attention.softmax.reference import Logits
from checkpoints.attention.stats import RowStats

INTERPRET = tc.INTERPRET  # kernels run in Triton's interpreter (TRITON_INTERPRET=1, CPU tests)
_KEY = ["D", "DV", "HAS_BIAS", "SIGNED", "HAS_WINDOW", "SOFTCAP", "PRECISION", "LEN_BUCKET"]

# --- kernels --------------------------------------------------------------------


@triton.jit
def _tanh(x):
    """tanh from exp2 (the interpreter and every GPU have it): sign(x) (1 - e) / (1 + e), e = exp(-2|x|)."""
    e = tl.exp2(-2.8853900817779268 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def _logits(q, k_ptrs, offs_n, qpos, S, slope, window, kmask_d,
            HAS_BIAS: tl.constexpr, SIGNED: tl.constexpr, HAS_WINDOW: tl.constexpr,
            MASK: tl.constexpr, PRECISION: tl.constexpr, qk_scale, SOFTCAP: tl.constexpr, softcap):
    """Scores of a (rows, BLOCK_N) tile in base-2 units, -inf where hidden, and the sign.
    `softcap` is the cap in base-2 units (c log2(e)): c tanh(z / c) scales with z."""
    if MASK:
        k = tl.load(k_ptrs, mask=kmask_d & (offs_n[None, :] < S), other=0.0)
    else:
        k = tl.load(k_ptrs, mask=kmask_d, other=0.0)
    a = tl.dot(q, k, input_precision=PRECISION) * qk_scale
    if SOFTCAP:
        a = softcap * _tanh(a / softcap)
    sign = a
    if SIGNED:
        sign = tl.where(a > 0, 1.0, tl.where(a < 0, -1.0, 0.0))
        a = tl.abs(a)
    if HAS_BIAS:
        a += slope * (offs_n[None, :] - qpos[:, None]).to(tl.float32)
    if MASK:
        visible = (offs_n[None, :] <= qpos[:, None]) & (offs_n[None, :] < S)
        if HAS_WINDOW:
            visible = visible & (offs_n[None, :] > qpos[:, None] - window)
        a = tl.where(visible, a, float("-inf"))
    return a, sign


@triton.jit
def _head_program(Hq, GROUPS, BLOCK_M: tl.constexpr):
    """Program 0 is the query block, program 1 the (batch, query head): returns
    (pid_m, pid_bh, b, h, kv head hk, query indices offs_m)."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // Hq
    h = pid_bh % Hq
    return pid_m, pid_bh, b, h, h // GROUPS, pid_m * BLOCK_M + tl.arange(0, BLOCK_M)


@triton.jit
def _kv_tiles(K, V, b, hk, skb, skh, skd, svb, svh, svd, offs_d, offs_dv, D, DV):
    """Base pointers of kv head hk's keys (transposed: (BLOCK_D, keys)) and values,
    and their feature masks."""
    kbase = K + b * skb + hk * skh + offs_d[:, None] * skd
    vbase = V + b * svb + hk * svh + offs_dv[None, :] * svd
    return kbase, vbase, offs_d[:, None] < D, offs_dv[None, :] < DV


@triton.jit
def _online_step(a, sign, v_ptrs, vmask, m_i, l_i, acc, SIGNED: tl.constexpr, PRECISION: tl.constexpr):
    m_new = tl.maximum(m_i, tl.max(a, 1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(a - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if SIGNED:
        p = p * sign
    v = tl.load(v_ptrs, mask=vmask, other=0.0)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return m_new, l_i, acc


@triton.jit
def _stream_keys(q, kbase, vbase, kmask_d, vmask_d, lo, hi, S, sks, svs, qpos, slope, window, qk_scale,
                 m_i, l_i, acc, HAS_BIAS: tl.constexpr, SIGNED: tl.constexpr, HAS_WINDOW: tl.constexpr,
                 MASK: tl.constexpr, PRECISION: tl.constexpr, BLOCK_N: tl.constexpr,
                 SOFTCAP: tl.constexpr, softcap):
    """Online softmax over keys [lo, hi) (of S; MASK hides keys beyond the causal
    edge, the window and S): the running (m_i, l_i, acc) after them."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        a, sign = _logits(q, kbase + offs_n[None, :] * sks, offs_n, qpos, S, slope, window, kmask_d,
                          HAS_BIAS, SIGNED, HAS_WINDOW, MASK, PRECISION, qk_scale, SOFTCAP, softcap)
        vmask = vmask_d
        if MASK:
            vmask = vmask_d & (offs_n[:, None] < S)
        m_i, l_i, acc = _online_step(a, sign, vbase + offs_n[:, None] * svs, vmask, m_i, l_i, acc, SIGNED, PRECISION)
    return m_i, l_i, acc


@tc.autotune(tc.configs(interpret_tile=64), _KEY)
@tc.jit_any_length
def _prefill_kernel(
    Q, K, V, O, M, L, Slopes,
    sqb, sqh, sqt, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sob, soh, sot, sod,
    Hq, GROUPS, T, S, q_offset, window, qk_scale, softcap, LEN_BUCKET,
    D: tl.constexpr, DV: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    HAS_BIAS: tl.constexpr, SIGNED: tl.constexpr, HAS_WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
    PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_m, pid_bh, b, h, hk, offs_m = _head_program(Hq, GROUPS, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    qmask = (offs_m[:, None] < T) & (offs_d[None, :] < D)
    q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqt + offs_d[None, :] * sqd, mask=qmask, other=0.0)
    qpos = q_offset + offs_m
    slope = 0.0
    if HAS_BIAS:
        slope = tl.load(Slopes + h).to(tl.float32) * 1.4426950408889634
    kbase, vbase, kmask_d, vmask_d = _kv_tiles(K, V, b, hk, skb, skh, skd, svb, svh, svd, offs_d, offs_dv, D, DV)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    first_row = q_offset + pid_m * BLOCK_M
    hi = tl.minimum(S, first_row + BLOCK_M)
    lo = 0
    if HAS_WINDOW:
        lo = tl.maximum(0, first_row - window + 1)
        lo = (lo // BLOCK_N) * BLOCK_N
        full_hi = lo
    else:
        # Key blocks entirely at or before the block's first row: visible to every row.
        full_hi = (tl.minimum(S, first_row + 1) // BLOCK_N) * BLOCK_N
    m_i, l_i, acc = _stream_keys(q, kbase, vbase, kmask_d, vmask_d, lo, full_hi, S, sks, svs, qpos, slope, window,
                                 qk_scale, m_i, l_i, acc, HAS_BIAS, SIGNED, HAS_WINDOW, False, PRECISION, BLOCK_N,
                                 SOFTCAP, softcap)
    m_i, l_i, acc = _stream_keys(q, kbase, vbase, kmask_d, vmask_d, full_hi, hi, S, sks, svs, qpos, slope, window,
                                 qk_scale, m_i, l_i, acc, HAS_BIAS, SIGNED, HAS_WINDOW, True, PRECISION, BLOCK_N,
                                 SOFTCAP, softcap)
    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    omask = (offs_m[:, None] < T) & (offs_dv[None, :] < DV)
    tl.store(O + b * sob + h * soh + offs_m[:, None] * sot + offs_dv[None, :] * sod,
             out.to(O.dtype.element_ty), mask=omask)
    row = pid_bh * T + offs_m
    tl.store(M + row, m_i, mask=offs_m < T)
    tl.store(L + row, l_i, mask=offs_m < T)


@triton.jit
def _group_query(Q, Slopes, b, hk, q_offset, sqb, sqh, sqd, GROUPS, D, BLOCK_D: tl.constexpr,
                 BLOCK_DV: tl.constexpr, BLOCK_H: tl.constexpr, HAS_BIAS: tl.constexpr):
    """A decode kernel's rows: the query heads of kv group `hk` of sequence b (their mask), the
    feature offsets, the queries, their position and ALiBi slope (log2 units)."""
    offs_h = tl.arange(0, BLOCK_H)
    h = hk * GROUPS + offs_h
    hmask = offs_h < GROUPS
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    q = tl.load(Q + b * sqb + h[:, None] * sqh + offs_d[None, :] * sqd,
                mask=hmask[:, None] & (offs_d[None, :] < D), other=0.0)
    qpos = tl.zeros([BLOCK_H], tl.int32) + q_offset
    slope = 0.0
    if HAS_BIAS:
        slope = tl.load(Slopes + h, mask=hmask, other=0.0).to(tl.float32)[:, None] * 1.4426950408889634
    return h, hmask, offs_d, offs_dv, q, qpos, slope


@triton.jit
def _store_split(Opart, Mpart, Lpart, b, h, hmask, split, Hkv, GROUPS, SPLITS, offs_dv, vmask_d, DV, m_i, l_i, acc):
    """A decode kernel's split: its unnormalised output, running max and sum for the combine."""
    row = (b * Hkv * GROUPS + h) * SPLITS + split
    tl.store(Opart + row[:, None] * DV + offs_dv[None, :], acc, mask=hmask[:, None] & vmask_d)
    tl.store(Mpart + row, m_i, mask=hmask)
    tl.store(Lpart + row, l_i, mask=hmask)


@tc.autotune(tc.configs(decode=True, rows=None, interpret_tile=64), _KEY)
@tc.jit_any_length
def _decode_kernel(
    Q, K, V, Opart, Mpart, Lpart, Slopes, Qpos,
    sqb, sqh, sqd, skb, skh, sks, skd, svb, svh, svs, svd,
    Hkv, GROUPS, S, q_offset, window, qk_scale, softcap, keys_per_split, SPLITS, LEN_BUCKET,
    D: tl.constexpr, DV: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_H: tl.constexpr,
    HAS_BIAS: tl.constexpr, SIGNED: tl.constexpr, HAS_WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
    PRECISION: tl.constexpr, BLOCK_N: tl.constexpr, RAGGED: tl.constexpr,
):
    """One query token per sequence; the query heads of a kv group form the rows.
    RAGGED: sequence b's query sits at Qpos[b] and sees keys 0..Qpos[b] (rows of
    different lengths in one cache); otherwise every query sits at q_offset."""
    pid_bk = tl.program_id(0)
    split = tl.program_id(1)
    b = pid_bk // Hkv
    hk = pid_bk % Hkv
    if RAGGED:
        q_offset = tl.load(Qpos + b)
    h, hmask, offs_d, offs_dv, q, qpos, slope = _group_query(Q, Slopes, b, hk, q_offset, sqb, sqh, sqd, GROUPS, D,
                                                             BLOCK_D, BLOCK_DV, BLOCK_H, HAS_BIAS)
    kbase, vbase, kmask_d, vmask_d = _kv_tiles(K, V, b, hk, skb, skh, skd, svb, svh, svd, offs_d, offs_dv, D, DV)
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DV], tl.float32)
    lo = split * keys_per_split
    hi = tl.minimum(tl.minimum(lo + keys_per_split, S), q_offset + 1)
    if HAS_WINDOW:
        lo = tl.maximum(lo, ((q_offset - window + 1) // BLOCK_N) * BLOCK_N)
    m_i, l_i, acc = _stream_keys(q, kbase, vbase, kmask_d, vmask_d, lo, hi, hi, sks, svs, qpos, slope, window,
                                 qk_scale, m_i, l_i, acc, HAS_BIAS, SIGNED, HAS_WINDOW, True, PRECISION, BLOCK_N,
                                 SOFTCAP, softcap)
    _store_split(Opart, Mpart, Lpart, b, h, hmask, split, Hkv, GROUPS, SPLITS, offs_dv, vmask_d, DV, m_i, l_i, acc)


@triton.jit
def _stream_pages(q, K, V, Table, stb, b, hk, skh, sks, skd, svh, svs, svd, offs_d, offs_dv, kmask_d, vmask_d,
                  lo, hi, PAGE, qpos, slope, window, qk_scale, m_i, l_i, acc, HAS_BIAS: tl.constexpr,
                  SIGNED: tl.constexpr, HAS_WINDOW: tl.constexpr, PRECISION: tl.constexpr, BLOCK_N: tl.constexpr,
                  SOFTCAP: tl.constexpr, softcap):
    """`_stream_keys` over a paged row: key n of row b is slot `Table[b, n // PAGE] * PAGE +
    n % PAGE` of the pool (K, V: (slots, Hkv, D)); keys [lo, hi) with the causal mask at hi."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        page = tl.load(Table + b * stb + offs_n // PAGE, mask=offs_n < hi, other=0)
        slot = page.to(tl.int64) * PAGE + offs_n % PAGE
        k_ptrs = K + hk * skh + offs_d[:, None] * skd + slot[None, :] * sks
        a, sign = _logits(q, k_ptrs, offs_n, qpos, hi, slope, window, kmask_d,
                          HAS_BIAS, SIGNED, HAS_WINDOW, True, PRECISION, qk_scale, SOFTCAP, softcap)
        v_ptrs = V + hk * svh + offs_dv[None, :] * svd + slot[:, None] * svs
        m_i, l_i, acc = _online_step(a, sign, v_ptrs, vmask_d & (offs_n[:, None] < hi), m_i, l_i, acc,
                                     SIGNED, PRECISION)
    return m_i, l_i, acc


@tc.autotune(tc.configs(decode=True, rows=None, interpret_tile=64), _KEY)
@tc.jit_any_length
def _paged_decode_kernel(
    Q, K, V, Table, Opart, Mpart, Lpart, Slopes, Qpos,
    sqb, sqh, sqd, sks, skh, skd, svs, svh, svd, stb, PAGE,
    Hkv, GROUPS, S, window, qk_scale, softcap, keys_per_split, SPLITS, LEN_BUCKET,
    D: tl.constexpr, DV: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_H: tl.constexpr,
    HAS_BIAS: tl.constexpr, SIGNED: tl.constexpr, HAS_WINDOW: tl.constexpr, SOFTCAP: tl.constexpr,
    PRECISION: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """`_decode_kernel` (ragged) reading the keys and values through the block table:
    row b's query sits at Qpos[b] and sees its keys 0..Qpos[b], found in the pool by
    `Table[b]` (vLLM's paged attention). S is the widest row's key count (the splits' range)."""
    pid_bk = tl.program_id(0)
    split = tl.program_id(1)
    b = pid_bk // Hkv
    hk = pid_bk % Hkv
    q_offset = tl.load(Qpos + b)
    h, hmask, offs_d, offs_dv, q, qpos, slope = _group_query(Q, Slopes, b, hk, q_offset, sqb, sqh, sqd, GROUPS, D,
                                                             BLOCK_D, BLOCK_DV, BLOCK_H, HAS_BIAS)
    kmask_d = offs_d[:, None] < D
    vmask_d = offs_dv[None, :] < DV
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, BLOCK_DV], tl.float32)
    lo = split * keys_per_split
    hi = tl.minimum(tl.minimum(lo + keys_per_split, S), q_offset + 1)
    if HAS_WINDOW:
        lo = tl.maximum(lo, ((q_offset - window + 1) // BLOCK_N) * BLOCK_N)
    m_i, l_i, acc = _stream_pages(q, K, V, Table, stb, b, hk, skh, sks, skd, svh, svs, svd, offs_d, offs_dv,
                                  kmask_d, vmask_d, lo, hi, PAGE, qpos, slope, window, qk_scale, m_i, l_i, acc,
                                  HAS_BIAS, SIGNED, HAS_WINDOW, PRECISION, BLOCK_N, SOFTCAP, softcap)
    _store_split(Opart, Mpart, Lpart, b, h, hmask, split, Hkv, GROUPS, SPLITS, offs_dv, vmask_d, DV, m_i, l_i, acc)


@triton.jit
def _weights(q, k_ptrs, offs_n, qpos, S, slope, window, kmask_d, m, l,
             HAS_BIAS: tl.constexpr, SIGNED: tl.constexpr, HAS_WINDOW: tl.constexpr,
             PRECISION: tl.constexpr, qk_scale, SOFTCAP: tl.constexpr, softcap):
    a, sign = _logits(q, k_ptrs, offs_n, qpos, S, slope, window, kmask_d,
                      HAS_BIAS, SIGNED, HAS_WINDOW, True, PRECISION, qk_scale, SOFTCAP, softcap)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    p = tl.exp2(a - m_safe[:, None]) / tl.where(l > 0, l, 1.0)[:, None]
    if SIGNED:
        p = p * sign
    return p


@triton.jit
def _stats_kernel(
    Q, K, Q2, K2, M, L, M2, L2, Slopes, AbsSum, Zeros, First, PlogP, Visible,
    sqb, sqh, sqt, sqd, skb, skh, sks, skd,
    Hq, GROUPS, T, S, q_offset, window, qk_scale, softcap, coef2,
    D: tl.constexpr, BLOCK_D: tl.constexpr,
    HAS_BIAS: tl.constexpr, SIGNED: tl.constexpr, HAS_WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, TWO: tl.constexpr,
    PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    """Row statistics of `w = p1 - coef2 * p2` (TWO) or `w = p1`, where
    p = sign * exp2(a - m) / l with the final (m, l) of the forward kernels."""
    pid_m, pid_bh, b, h, hk, offs_m = _head_program(Hq, GROUPS, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    rmask = offs_m < T
    qoff = b * sqb + h * sqh + offs_m[:, None] * sqt + offs_d[None, :] * sqd
    qmask = rmask[:, None] & (offs_d[None, :] < D)
    row = pid_bh * T + offs_m
    q = tl.load(Q + qoff, mask=qmask, other=0.0)
    m = tl.load(M + row, mask=rmask, other=float("-inf"))
    l = tl.load(L + row, mask=rmask, other=0.0)
    q2 = q
    m2 = m
    l2 = l
    if TWO:
        q2 = tl.load(Q2 + qoff, mask=qmask, other=0.0)
        m2 = tl.load(M2 + row, mask=rmask, other=float("-inf"))
        l2 = tl.load(L2 + row, mask=rmask, other=0.0)
    qpos = q_offset + offs_m
    slope = 0.0
    if HAS_BIAS:
        slope = tl.load(Slopes + h).to(tl.float32) * 1.4426950408889634
    koff = b * skb + hk * skh + offs_d[:, None] * skd
    kmask_d = offs_d[:, None] < D
    abs_sum, zeros, first, plogp, visible = tc.stats_init(BLOCK_M)
    first_row = q_offset + pid_m * BLOCK_M
    hi = tl.minimum(S, first_row + BLOCK_M)
    lo = 0
    if HAS_WINDOW:
        lo = (tl.maximum(0, first_row - window + 1) // BLOCK_N) * BLOCK_N
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        w = _weights(q, K + koff + offs_n[None, :] * sks, offs_n, qpos, S, slope, window, kmask_d, m, l,
                     HAS_BIAS, SIGNED, HAS_WINDOW, PRECISION, qk_scale, SOFTCAP, softcap)
        if TWO:
            w -= coef2 * _weights(q2, K2 + koff + offs_n[None, :] * sks, offs_n, qpos, S, slope, window,
                                  kmask_d, m2, l2, HAS_BIAS, SIGNED, HAS_WINDOW, PRECISION, qk_scale, SOFTCAP,
                                  softcap)
        vis = (offs_n[None, :] <= qpos[:, None]) & (offs_n[None, :] < S)
        if HAS_WINDOW:
            vis = vis & (offs_n[None, :] > qpos[:, None] - window)
        abs_sum, zeros, first, plogp, visible = tc.stats_update(w, vis, offs_n, abs_sum, zeros, first, plogp, visible)
    tc.stats_store(AbsSum, Zeros, First, PlogP, Visible, b, h, offs_m, Hq, T, rmask, abs_sum, zeros, first, plogp,
                   visible)


# --- launchers --------------------------------------------------------------------


def _common(q, k, v, slopes, window, softcap):
    tc.check_device(q)
    tc.check_heads(q, k)
    slopes_t = slopes.to(q.device, torch.float32).contiguous() if slopes is not None else q
    return dict(
        D=q.shape[-1], DV=v.shape[-1], BLOCK_D=tc.pow2(q.shape[-1]), BLOCK_DV=tc.pow2(v.shape[-1]),
        HAS_BIAS=slopes is not None, HAS_WINDOW=window is not None, SOFTCAP=softcap is not None,
        PRECISION=tc.precision(q.dtype),
    ), slopes_t


def _cap(softcap):
    """The softcap in the kernels' base-2 units (1.0, unused, without one)."""
    return float(softcap) * tc.LOG2E if softcap is not None else 1.0


def prefill(q, k, v, q_offset, *, scale, slopes=None, window=None, signed=False, softcap=None, out=None):
    """q (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, Dv); query t at absolute
    position q_offset + t -> (out (B, Hq, T, Dv) in q's dtype, m, l (B, Hq, T)
    fp32 with m in base-2 units). `out`, when given, is the output buffer."""
    b, hq, t, _ = q.shape
    meta, slopes_t = _common(q, k, v, slopes, window, softcap)
    out = q.new_empty(b, hq, t, v.shape[-1]) if out is None else out
    m = torch.full((b, hq, t), float("nan"), device=q.device)
    l = torch.full_like(m, float("nan"))
    if t == 0:
        return out, m, l
    grid = lambda meta_: (triton.cdiv(t, meta_["BLOCK_M"]), b * hq)  # noqa: E731
    _prefill_kernel[grid](
        q, k, v, out, m, l, slopes_t, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        hq, hq // k.shape[1], t, k.shape[2], q_offset, window or 0, scale * tc.LOG2E, _cap(softcap),
        tc.length_bucket(k.shape[2]), SIGNED=signed, **meta,
    )
    return out, m, l


def decode(q, k, v, q_offset, *, scale, slopes=None, window=None, signed=False, softcap=None, splits=None, out=None):
    """One query token: q (B, Hq, 1, D) at absolute position q_offset over the
    cache k (B, Hkv, S, D), v (B, Hkv, S, Dv); the keys are split into `splits`
    ranges reduced afterwards. `q_offset` may be a (B,) tensor: row b's query
    then sits at q_offset[b] and sees its first q_offset[b] + 1 keys (a ragged
    batch; keys past them are never read). Returns (out (B, Hq, 1, Dv), m, l (B, Hq, 1))."""
    b, hq, t, _ = q.shape
    if t != 1:
        raise ValueError(f"decode takes one query token, got {t}")
    hkv, s = k.shape[1], k.shape[2]
    meta, slopes_t = _common(q, k, v, slopes, window, softcap)
    splits = splits or tc.decode_splits(b, hkv, s)
    per_split = triton.cdiv(max(s, 1), splits)
    groups = hq // hkv
    # Partials start as NaN (cheap: B x Hq x splits rows) so a missed write cannot pass silently.
    opart = torch.full((b, hq, splits, v.shape[-1]), float("nan"), device=q.device)
    mpart = torch.full((b, hq, splits), float("nan"), device=q.device)
    lpart = torch.full_like(mpart, float("nan"))
    qs = q[:, :, 0]
    ragged = torch.is_tensor(q_offset)
    qpos = q_offset.to(device=q.device, dtype=torch.int32).contiguous() if ragged else slopes_t
    _decode_kernel[(b * hkv, splits)](
        q, k, v, opart, mpart, lpart, slopes_t, qpos, qs.stride(0), qs.stride(1), qs.stride(2),
        *k.stride(), *v.stride(), hkv, groups, s, 0 if ragged else q_offset, window or 0, scale * tc.LOG2E,
        _cap(softcap), per_split, splits, tc.length_bucket(s), BLOCK_H=tc.pow2(groups), SIGNED=signed,
        RAGGED=ragged, **meta,
    )
    return _reduce_splits(q, opart, mpart, lpart, out)


def _reduce_splits(q, opart, mpart, lpart, out):
    """Flash-decoding's reduction of the key splits' partial (acc, m, l) into the output."""
    m = mpart.amax(-1)
    m_safe = torch.where(m == float("-inf"), 0.0, m)
    r = torch.exp2(mpart - m_safe[..., None])  # 0 for empty splits
    l = (lpart * r).sum(-1)
    acc = (opart * r[..., None]).sum(-2)
    res = (acc / torch.where(l > 0, l, 1.0)[..., None])[:, :, None].to(q.dtype)
    if out is not None:
        out.copy_(res)
        res = out
    return res, m[:, :, None], l[:, :, None]


def decode_paged(q, k_pool, v_pool, table, positions, *, scale, slopes=None, window=None, signed=False,
                 softcap=None, splits=None, out=None):
    """`decode` of a ragged batch whose keys and values live in a paged pool
    (`checkpoints.kv.block_pool`), read through the block table, nothing gathered:
    q (B, Hq, 1, D); k_pool (blocks, block_size, Hkv, D), v_pool (blocks, block_size, Hkv, Dv);
    table (B, W) long, row b's blocks in position order; positions (B,) long: row b's query
    sits at positions[b] and sees its first positions[b] + 1 keys. Its naive twin is `decode`
    on the rows gathered (`checkpoints.kv.views.gather`). Returns (out (B, Hq, 1, Dv), m, l (B, Hq, 1))."""
    b, hq, t, _ = q.shape
    if t != 1:
        raise ValueError(f"decode_paged takes one query token, got {t}")
    page, hkv = k_pool.shape[1], k_pool.shape[2]
    s = table.shape[1] * page  # keys a row's table can reach
    k, v = k_pool.view(-1, *k_pool.shape[2:]), v_pool.view(-1, *v_pool.shape[2:])  # (slots, Hkv, D)
    meta, slopes_t = _common(q, k.transpose(0, 1)[None], v.transpose(0, 1)[None], slopes, window, softcap)
    splits = splits or tc.decode_splits(b, hkv, s)
    per_split = triton.cdiv(max(s, 1), splits)
    groups = hq // hkv
    opart = torch.full((b, hq, splits, v.shape[-1]), float("nan"), device=q.device)
    mpart = torch.full((b, hq, splits), float("nan"), device=q.device)
    lpart = torch.full_like(mpart, float("nan"))
    qs = q[:, :, 0]
    qpos = positions.to(device=q.device, dtype=torch.int32).contiguous()
    table = table.to(q.device).contiguous()
    _paged_decode_kernel[(b * hkv, splits)](
        q, k, v, table, opart, mpart, lpart, slopes_t, qpos, qs.stride(0), qs.stride(1), qs.stride(2),
        *k.stride(), *v.stride(), table.stride(0), page, hkv, groups, s, window or 0, scale * tc.LOG2E,
        _cap(softcap), per_split, splits, tc.length_bucket(s), BLOCK_H=tc.pow2(groups), SIGNED=signed, **meta,
    )
    return _reduce_splits(q, opart, mpart, lpart, out)


def attention(q, k, v, q_offset, *, scale, slopes=None, window=None, signed=False, softcap=None, out=None):
    """Decode kernel for one query token, prefill kernel otherwise."""
    fn = decode if q.shape[2] == 1 else prefill
    return fn(q, k, v, q_offset, scale=scale, slopes=slopes, window=window, signed=signed, softcap=softcap, out=out)


def row_stats(terms, q_offset, *, scale, slopes=None, window=None, signed=False, softcap=None,
              layer=0) -> RowStats:
    """`RowStats` of `w = p_1 - coef * p_2` (diff: terms [(1, q1, k1, m1, l1),
    (-coef, q2, k2, m2, l2)]) or `w = p_1` (one term), where m, l come from
    `prefill`/`decode` on the same q, k."""
    (c1, q, k, m, l), *rest = terms
    if c1 != 1.0:
        raise ValueError("the first term's coefficient must be 1")
    if len(rest) > 1:
        raise ValueError("at most two terms")
    two = bool(rest)
    q = q.contiguous()
    k = k.contiguous()
    if two:
        coef2 = -float(rest[0][0])
        q2, k2, m2, l2 = (x.contiguous() for x in rest[0][1:])
    else:
        coef2, q2, k2, m2, l2 = 0.0, q, k, m, l
    b, hq, t, d = q.shape
    meta, slopes_t = _common(q, k, q, slopes, window, softcap)
    outs = tc.stats_buffers(b, hq, t, q.device)
    block = 64
    _stats_kernel[(triton.cdiv(t, block), b * hq)](
        q, k, q2, k2, m.contiguous(), l.contiguous(), m2.contiguous(), l2.contiguous(), slopes_t, *outs,
        *q.stride(), *k.stride(), hq, hq // k.shape[1], t, k.shape[2], q_offset, window or 0,
        scale * tc.LOG2E, _cap(softcap), coef2, D=d, BLOCK_D=meta["BLOCK_D"], HAS_BIAS=meta["HAS_BIAS"],
        SIGNED=signed, HAS_WINDOW=meta["HAS_WINDOW"], SOFTCAP=meta["SOFTCAP"], TWO=two, PRECISION=meta["PRECISION"], BLOCK_M=block, BLOCK_N=64,
        num_warps=4,
    )
    return tc.stats_from_buffers(outs, layer)


# --- the family's public function ------------------------------------------------


def family_attention(
    terms: list[Term], v: torch.Tensor, q_offset: int, logits: Logits, *,
    collect_stats: bool = False, layer: int = 0,
) -> tuple[list[torch.Tensor], RowStats | None]:
    """The twin of `chunked.family_attention`: one softmax per term (coef,
    q (B, Hq, T, D), k (B, Hkv, S, D)) over the shared v (B, Hkv, S, Dv), and,
    when asked, the RowStats of `w = sum_c coef_c * p_c`."""
    kw = logits._asdict()
    return run_terms(terms, lambda q, k: attention(q, k, v, q_offset, **kw),
                     lambda st: row_stats(st, q_offset, layer=layer, **kw), collect_stats)
