"""The pointwise variants (rela, tra, tda) streamed over key blocks in
PyTorch: weights are final as soon as a tile's scores are known, so one pass
gives the output and the statistics; memory O(block^2 + T x D).

Layout: the query heads of one kv head form one matrix (B, Hkv, G*n, D)
(gqa.group_rows), so a tile of dot products is viewed as (B, Hkv, G, n, m)
and grouped-query attention needs no copy of k or v."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from checkpoints.attention.gqa import group_rows, per_head
from checkpoints.attention.pointwise.reference import threshold_weights
from checkpoints.attention.stats import BlockedStats, RowStats

# (dots: one (B, Hkv, G, n, m) fp32 tile of raw q.k per q/k pair, qpos (n,), kpos (m,)) -> weights
TileWeights = Callable[[list[torch.Tensor], torch.Tensor, torch.Tensor], torch.Tensor]


def stream_pointwise(
    qs: list[torch.Tensor],
    ks: list[torch.Tensor],
    v: torch.Tensor,
    q_offset: int,
    weights: TileWeights,
    *,
    block: int = 1024,
    collect_stats: bool = False,
    layer: int = 0,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, RowStats | None]:
    """`out_i = sum_j w_ij v_j` for weights that are final as soon as a tile's
    scores are known (rela, tra, tda): one pass, memory O(block^2 + T x D), and
    the statistics accumulate in the same pass.

    qs: (B, Hq, T, D) each; ks: (B, Hkv, S, D) each, paired with qs; v (B, Hkv, S, Dv).
    Hidden keys get weight exactly 0 whatever `weights` returns for them."""
    b, hq, t, _ = qs[0].shape
    hkv, s, dv = ks[0].shape[1], ks[0].shape[2], v.shape[-1]
    g = hq // hkv
    out = qs[0].new_empty(b, hq, t, dv) if out is None else out
    stats = BlockedStats(collect_stats, b, hq, t, v.device, layer)
    for lo in range(0, t, block):
        hi = min(t, lo + block)
        n = hi - lo
        qbs = [group_rows(q[:, :, lo:hi], hkv) for q in qs]
        qpos = torch.arange(q_offset + lo, q_offset + hi, device=v.device)
        acc = torch.zeros(b, hkv, g * n, dv, device=v.device)
        stats.begin((b, hkv, g, n))
        end = min(s, q_offset + hi)
        for klo in range(0, end, block):
            khi = min(end, klo + block)
            dots = [(qb @ k[:, :, klo:khi].float().transpose(-1, -2)).view(b, hkv, g, n, -1) for qb, k in zip(qbs, ks, strict=True)]
            kpos = torch.arange(klo, khi, device=v.device)
            w = weights(dots, qpos, kpos)
            if khi - 1 <= q_offset + lo:  # every row sees every key of the tile: no mask
                visible = torch.ones(1, 1, dtype=torch.bool, device=v.device)
            else:
                visible = kpos[None, :] <= qpos[:, None]
                w = torch.where(visible, w, 0.0)
            acc += w.view(b, hkv, g * n, -1) @ v[:, :, klo:khi].float()
            stats.update(w, visible, klo)
        out[:, :, lo:hi] = acc.view(b, hq, n, dv).to(out.dtype)
        stats.end()
    return out, stats.result()


def rela_chunked(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int, *, block: int = 1024,
    collect_stats: bool = False, layer: int = 0, out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, RowStats | None]:
    """ReLA streamed over key blocks (one pass; statistics in the same pass)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    return stream_pointwise([q], [k], v, q_offset, lambda dots, qpos, kpos: torch.relu(dots[0] * scale),
                            block=block, collect_stats=collect_stats, layer=layer, out=out)


def threshold_chunked(
    qs: list[torch.Tensor], ks: list[torch.Tensor], v: torch.Tensor, q_offset: int, beta: torch.Tensor,
    p: float = 2.0, lam: float | torch.Tensor = 0.0, *, block: int = 1024, collect_stats: bool = False, layer: int = 0,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, RowStats | None]:
    """TRA (one q/k pair) or TDA (two pairs, `w1 - lam * w2`) streamed over key blocks."""
    d = qs[0].shape[-1]
    hkv = ks[0].shape[1]
    lam = lam.to(v.device) if isinstance(lam, torch.Tensor) else lam
    beta_t = per_head(beta.to(v.device), hkv)  # (Hkv, G, 1, 1)

    def weights(dots: list[torch.Tensor], qpos: torch.Tensor, kpos: torch.Tensor) -> torch.Tensor:
        tau = beta_t * torch.sqrt(2.0 * torch.log(qpos.float() + 1.0) / d)[:, None]  # (Hkv, G, n, 1)
        w = threshold_weights(dots[0] / d, tau, p)
        if len(dots) == 2:
            w = w - lam * threshold_weights(dots[1] / d, tau, p)
        return w

    return stream_pointwise(qs, ks, v, q_offset, weights, block=block, collect_stats=collect_stats,
                            layer=layer, out=out)
