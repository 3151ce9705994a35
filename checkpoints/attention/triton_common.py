"""Pieces shared by every Triton kernel (softmax family, softpick, pointwise,
entmax): autotuning configurations, device and precision checks, statistics
buffers and the jit helpers that load tiles and accumulate row statistics.
Imported only when the triton backend runs.

Row layout of the non-softmax kernels: a program owns a block of rows of ONE kv head; row r stands for
query t = r // G of query head h = hk * G + r % G (G = query heads per kv
head). Prefill (many queries) and decode (one query: the G heads of a group
become the rows) are the same kernel with different tile sizes, and the K/V
tiles loaded once serve every query head of the group. Query t sits at
absolute position `q_offset + t` (bottom-right aligned).

Under `TRITON_INTERPRET=1` (CPU tests) one configuration with large tiles is
used; on CUDA a few configurations are autotuned."""

from __future__ import annotations

import inspect
import os

import torch
import triton
import triton.language as tl

from checkpoints.attention.stats import RowStats, entropy_from_sums

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
LOG2E = 1.4426950408889634
MAX_BLOCK_N = 128  # split boundaries are multiples of this, so every BLOCK_N divides them


def configs(decode: bool = False, *, rows: int | None = 16, interpret_tile: int = 128) -> list[triton.Config]:
    """Autotuning configurations. Prefill tiles BLOCK_M x BLOCK_N; decode tiles
    BLOCK_N keys for `rows` rows (BLOCK_M; None for kernels whose rows are
    not a meta-parameter). Under the interpreter one configuration with
    `interpret_tile`-wide tiles: its cost is per operation, not per element."""
    if decode:
        fixed = {} if rows is None else {"BLOCK_M": rows}
        if INTERPRET:
            return [triton.Config({**fixed, "BLOCK_N": interpret_tile}, num_warps=4, num_stages=1)]
        return [triton.Config({**fixed, "BLOCK_N": bn}, num_warps=w, num_stages=2)
                for bn, w in [(64, 4), (128, 4), (128, 8)]]
    if INTERPRET:
        return [triton.Config({"BLOCK_M": interpret_tile, "BLOCK_N": interpret_tile}, num_warps=4, num_stages=1)]
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bm, bn, w, s in [(128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3), (128, 32, 4, 3)]
    ]


def check_device(q: torch.Tensor) -> None:
    if q.device.type != "cuda" and not INTERPRET:
        raise RuntimeError(
            "the triton attention backend needs CUDA tensors (or TRITON_INTERPRET=1 set before "
            "triton is imported, for CPU tests); use backend 'torch' on CPU"
        )


def precision(dtype: torch.dtype) -> str:
    """fp32 inputs use exact fp32 dots unless torch allows TF32 matmuls."""
    if dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32:
        return "ieee"
    return "tf32"


def pow2(n: int, least: int = 16) -> int:
    return max(least, triton.next_power_of_2(n))


def decode_splits(b: int, hkv: int, s: int) -> int:
    """Key splits for one-token decode: enough programs to fill the GPU."""
    if INTERPRET:
        return 1
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return max(1, min(triton.cdiv(2 * sms, b * hkv), triton.cdiv(s, 512)))


def keys_per_split(s: int, splits: int) -> int:
    per = triton.cdiv(max(s, 1), splits)
    return triton.cdiv(per, MAX_BLOCK_N) * MAX_BLOCK_N


def stats_buffers(b: int, hq: int, t: int, device: torch.device) -> list[torch.Tensor]:
    """abs_sum, zeros, first, plogp, visible: NaN-filled so a missed write shows."""
    return [torch.full((b, hq, t), float("nan"), device=device) for _ in range(5)]


# Arguments that change with the prompt or cache length: not specialised (Triton would
# compile a kernel per divisibility of each, a new compile at many new lengths), so one
# compiled kernel serves every length; tiles are tuned per LEN_BUCKET instead.
LENGTH_ARGS = ["T", "S", "q_offset", "window", "keys_per_split", "SPLITS", "LEN_BUCKET"]


def jit_any_length(fn):
    """triton.jit with the kernel's length arguments (those of LENGTH_ARGS it has) not specialised."""
    names = inspect.signature(fn).parameters
    return triton.jit(do_not_specialize=[a for a in LENGTH_ARGS if a in names])(fn)


def length_bucket(keys: int) -> int:
    """The autotuning bucket of a key length: its power of two (at least 2^10), so tiles are
    tuned once per bucket (1k, 2k, ... 128k), not once per process at whatever length came
    first, nor at every length."""
    return max(10, (max(keys, 1) - 1).bit_length())


def autotune(configs_: list[triton.Config], key: list[str]):
    """triton.autotune with its timings kept on disk (`cache_results`, under TRITON_CACHE_DIR:
    the service points it at its home), so a new process does not tune again."""
    return triton.autotune(configs=configs_, key=key, cache_results=True)


def autotuned(kernel, key: list[str]) -> tuple:
    """(prefill, decode): the kernel autotuned over prefill and decode tiles."""
    return autotune(configs(), key)(kernel), autotune(configs(decode=True), key)(kernel)


def check_heads(q: torch.Tensor, k: torch.Tensor) -> None:
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"query heads {q.shape[1]} must be a multiple of kv heads {k.shape[1]}")


def outputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor | None,
            collect_stats: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Check the inputs of a launcher; return the output buffer (B, Hq, T, Dv)
    (`out` when given) and the five statistics buffers (B, Hq, T) (the output
    buffer five times as a placeholder when not collecting)."""
    check_device(q)
    check_heads(q, k)
    b, hq, t, _ = q.shape
    out = q.new_empty(b, hq, t, v.shape[-1]) if out is None else out
    return out, (stats_buffers(b, hq, t, q.device) if collect_stats else [out] * 5)


def stats_from_buffers(bufs: list[torch.Tensor], layer: int) -> RowStats:
    abs_sum, zeros, first, plogp, visible = bufs
    return RowStats(layer=layer, abs_sum=abs_sum, zeros=zeros, first=first,
                    entropy=entropy_from_sums(abs_sum, plogp), visible=visible)


def same_strides(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Kernels address paired tensors (q/q2, k/k2) with one set of strides."""
    if a.stride() != b.stride():
        return a.contiguous(), b.contiguous()
    return a, b


def pow_code(r: float) -> int:
    """The POW constant of `pow_r` for exponent r: 1 and 2 get exact forms, 0 any other."""
    return 1 if r == 1.0 else (2 if r == 2.0 else 0)


# --- jit helpers --------------------------------------------------------------------


@triton.jit
def pow_r(y, r, POW: tl.constexpr):
    """y^r for y >= 0 (POW 1: r = 1, 2: r = 2, 0: any r > 0 through exp2/log2)."""
    if POW == 1:
        return y
    elif POW == 2:
        return y * y
    else:
        return tl.where(y > 0, tl.exp2(r * tl.log2(tl.where(y > 0, y, 1.0))), 0.0)


@triton.jit
def row_layout(pid_m, GROUPS, T, hk, BLOCK_M: tl.constexpr):
    """Rows of this program: (query index t, query head h, row mask)."""
    offs_r = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    t = offs_r // GROUPS
    h = hk * GROUPS + offs_r % GROUPS
    return t, h, t < T


@triton.jit
def group_program(Hq, GROUPS, T, BLOCK_M: tl.constexpr):
    """This program's rows: program 0 is the row block, program 1 the (batch,
    kv head); returns (pid_m, b, hk, t, h, row mask)."""
    pid_m = tl.program_id(0)
    pid_bk = tl.program_id(1)
    hkv = Hq // GROUPS
    b = pid_bk // hkv
    hk = pid_bk % hkv
    t, h, rmask = row_layout(pid_m, GROUPS, T, hk, BLOCK_M)
    return pid_m, b, hk, t, h, rmask


@triton.jit
def store_rows(O, acc, b, h, t, rmask, sob, soh, sot, sod, offs_dv, DV):
    """Store (rows, BLOCK_DV) outputs at O[b, h, t, :DV] in O's dtype."""
    omask = rmask[:, None] & (offs_dv[None, :] < DV)
    tl.store(O + b * sob + h[:, None] * soh + t[:, None] * sot + offs_dv[None, :] * sod,
             acc.to(O.dtype.element_ty), mask=omask)


@triton.jit
def key_bounds(pid_m, split, GROUPS, T, S, q_offset, keys_per_split, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr):
    """[lo, hi) keys this program streams, and `full_hi`: keys before it are
    visible to every row of the block (no mask needed)."""
    t_first = (pid_m * BLOCK_M) // GROUPS
    t_last = tl.minimum(T - 1, (pid_m * BLOCK_M + BLOCK_M - 1) // GROUPS)
    lo = split * keys_per_split
    hi = tl.minimum(tl.minimum(S, q_offset + t_last + 1), lo + keys_per_split)
    all_see = tl.minimum(tl.minimum(S, q_offset + t_first + 1), hi)
    full_hi = lo + tl.maximum(0, (all_see - lo) // BLOCK_N) * BLOCK_N
    return lo, hi, full_hi


@triton.jit
def load_rows(Q, b, h, t, rmask, sqb, sqh, sqt, sqd, offs_d, D):
    return tl.load(Q + b * sqb + h[:, None] * sqh + t[:, None] * sqt + offs_d[None, :] * sqd,
                   mask=rmask[:, None] & (offs_d[None, :] < D), other=0.0)


@triton.jit
def load_keys_t(K, b, hk, offs_n, hi, skb, skh, sks, skd, offs_d, D):
    """(BLOCK_D, BLOCK_N) transposed key tile, zero beyond `hi`."""
    return tl.load(K + b * skb + hk * skh + offs_n[None, :] * sks + offs_d[:, None] * skd,
                   mask=(offs_d[:, None] < D) & (offs_n[None, :] < hi), other=0.0)


@triton.jit
def load_values(V, b, hk, offs_n, hi, svb, svh, svs, svd, offs_dv, DV):
    return tl.load(V + b * svb + hk * svh + offs_n[:, None] * svs + offs_dv[None, :] * svd,
                   mask=(offs_n[:, None] < hi) & (offs_dv[None, :] < DV), other=0.0)


@triton.jit
def visibility(offs_n, qpos, hi):
    return (offs_n[None, :] <= qpos[:, None]) & (offs_n[None, :] < hi)


@triton.jit
def stats_init(BLOCK_M: tl.constexpr):
    """Zeroed row-statistics accumulators: abs_sum, zeros, first, plogp, visible."""
    return (tl.zeros([BLOCK_M], tl.float32), tl.zeros([BLOCK_M], tl.float32), tl.zeros([BLOCK_M], tl.float32),
            tl.zeros([BLOCK_M], tl.float32), tl.zeros([BLOCK_M], tl.float32))


@triton.jit
def stats_update(w, vis, offs_n, abs_sum, zeros, first, plogp, visible):
    """Add one tile of final weights to the row statistics accumulators."""
    aw = tl.where(vis, tl.abs(w), 0.0)
    abs_sum += tl.sum(aw, 1)
    plogp += tl.sum(tl.where(aw > 0, aw * tl.log(tl.where(aw > 0, aw, 1.0)), 0.0), 1)
    zeros += tl.sum(tl.where(vis & (w == 0), 1.0, 0.0), 1)
    visible += tl.sum(tl.where(vis, 1.0, 0.0), 1)
    first += tl.sum(tl.where(vis & (offs_n[None, :] == 0), w, 0.0), 1)
    return abs_sum, zeros, first, plogp, visible


@triton.jit
def stats_store(AbsSum, Zeros, First, PlogP, Visible, b, h, t, Hq, T, rmask, abs_sum, zeros, first, plogp, visible):
    """Store the accumulators of rows (b, h, t) into the (B, Hq, T) buffers."""
    srow = (b * Hq + h) * T + t
    tl.store(AbsSum + srow, abs_sum, mask=rmask)
    tl.store(Zeros + srow, zeros, mask=rmask)
    tl.store(First + srow, first, mask=rmask)
    tl.store(PlogP + srow, plogp, mask=rmask)
    tl.store(Visible + srow, visible, mask=rmask)
