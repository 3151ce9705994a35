"""alpha-entmax attention streamed over key blocks in PyTorch (formula in
reference.py): a max pass, Newton passes for tau (each one pass over the key
blocks), then one output pass; memory O(block x N) at most.

Shapes: q (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, Dv); the query heads
of a kv head form one matrix of rows (gqa.group_rows). The Triton kernel
(triton.py) runs the same search with the same limits."""

from __future__ import annotations

import math

import torch

from checkpoints import hostsync
from checkpoints.attention.entmax.reference import check_alpha, dpow_r, pow_r, scale_queries
from checkpoints.attention.gqa import group_rows, per_head
from checkpoints.attention.stats import BlockedStats, RowStats

NEWTON_MAX_ITERS = 60
KEEP_SCORES_BYTES = 32 * 2**20  # streaming entmax keeps a query block's scores below this size
NEWTON_TOL = 1e-6  # relative step size (a few fp32 ulps) below which Newton has converged


def entmax_chunked(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int, alpha: float = 1.5, *,
    as_beta: torch.Tensor | None = None, as_gamma: torch.Tensor | None = None, block: int = 1024,
    collect_stats: bool = False, layer: int = 0, out: torch.Tensor | None = None,
    slopes: torch.Tensor | None = None,
) -> tuple[torch.Tensor, RowStats | None]:
    """Entmax attention streamed over key blocks: a max pass, Newton passes for
    tau (see the module docstring), then one output pass."""
    alpha = check_alpha(alpha)
    r = 1.0 / (alpha - 1.0)
    q = scale_queries(q, q_offset, as_beta, as_gamma)
    b, hq, t, d = q.shape
    hkv, s, dv = k.shape[1], k.shape[2], v.shape[-1]
    g = hq // hkv
    out = q.new_empty(b, hq, t, dv) if out is None else out
    # ALiBi in x units: (alpha - 1) slope_h, viewed (Hkv, G, 1, 1) to broadcast over tiles.
    bias = None if slopes is None else per_head(slopes.to(q.device), hkv) * (alpha - 1.0)
    stats = BlockedStats(collect_stats, b, hq, t, q.device, layer)
    for lo in range(0, t, block):
        hi = min(t, lo + block)
        n = hi - lo
        qb = group_rows(q[:, :, lo:hi], hkv) * ((alpha - 1.0) / math.sqrt(d))
        qpos = torch.arange(q_offset + lo, q_offset + hi, device=q.device)
        end = min(s, q_offset + hi)
        ranges = [(klo, min(end, klo + block)) for klo in range(0, end, block)]

        # Small rows (decode, short prompts): keep the scores for the Newton passes
        # instead of recomputing them; the budget keeps memory O(block x N) and small.
        kept: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = (
            {} if b * hq * n * end * 4 <= KEEP_SCORES_BYTES else None)

        def tile(klo: int, khi: int, qb=qb, n=n, qpos=qpos, kept=kept) -> tuple[torch.Tensor, torch.Tensor]:
            if kept is not None and klo in kept:
                return kept[klo]
            x = (qb @ k[:, :, klo:khi].float().transpose(-1, -2)).view(b, hkv, g, n, -1)
            kpos = torch.arange(klo, khi, device=q.device)
            if bias is not None:
                x = x + bias * (kpos[None, :] - qpos[:, None]).float()
            res = x, kpos[None, :] <= qpos[:, None]
            if kept is not None:
                kept[klo] = res
            return res

        top = torch.full((b, hkv, g, n), float("-inf"), device=q.device)
        for klo, khi in ranges:
            x, visible = tile(klo, khi)
            top = torch.maximum(top, x.masked_fill(~visible, float("-inf")).amax(-1))
        seen = torch.clamp(qpos + 1, max=s).float()  # visible keys per row
        floor = torch.where(top > float("-inf"), top - 1.0, 0.0)
        tau = torch.where(top > float("-inf"), top - seen ** (1.0 - alpha), 0.0)
        for it in range(NEWTON_MAX_ITERS):
            f = torch.full_like(tau, -1.0)
            fp = torch.zeros_like(tau)
            for klo, khi in ranges:
                x, visible = tile(klo, khi)
                y = torch.where(visible, torch.relu(x - tau[..., None]), 0.0)
                f += pow_r(y, r).sum(-1)
                fp += dpow_r(y, r).sum(-1)
            step = torch.where(fp > 0, f / (r * fp.clamp_min(1e-30)), 0.0)
            tau = torch.maximum(tau + step, floor)
            # After the first (leftward) step the iterates only rise; a step that is
            # not clearly positive is rounding noise: the row has converged. Asked only where
            # the answer is on the host already (on a GPU the Triton kernel is the fast path).
            if it > 0 and hostsync.reads_are_free(step) and not (step > NEWTON_TOL * tau.abs().clamp_min(1.0)).any():
                break
        acc = torch.zeros(b, hkv, g * n, dv, device=q.device)
        stats.begin((b, hkv, g, n))
        for klo, khi in ranges:  # the output pass, with the statistics of the final weights
            x, visible = tile(klo, khi)
            w = pow_r(torch.where(visible, torch.relu(x - tau[..., None]), 0.0), r)
            acc += w.view(b, hkv, g * n, -1) @ v[:, :, klo:khi].float()
            stats.update(w, visible, klo)
        out[:, :, lo:hi] = acc.view(b, hq, n, dv).to(out.dtype)
        stats.end()
    return out, stats.result()
