"""Shared pieces of the non-softmax variants (softpick, rela, tra, tda, entmax):
the streaming PyTorch loop over (query block, key block) tiles for weights
that are a pointwise function of the scores, statistics concatenation, and
the layer whose `core` dispatches between the three implementations.

Layout of the streaming paths (as in softmax.py): the query heads of one kv
head form one matrix (B, Hkv, G*n, D), so a tile of dot products is viewed as
(B, Hkv, G, n, m) and grouped-query attention needs no copy of k or v."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch

from checkpoints.attention.base import AttentionContext, AttentionLayer, RowStats
from checkpoints.attention.softmax import causal_mask, expand_kv
from checkpoints.attention.stats import StreamingStats, stats_from_weights
from checkpoints.errors import ConfigError

# (dots: one (B, Hkv, G, n, m) fp32 tile of raw q.k per q/k pair, qpos (n,), kpos (m,)) -> weights
TileWeights = Callable[[list[torch.Tensor], torch.Tensor, torch.Tensor], torch.Tensor]


def group_rows(x: torch.Tensor, hkv: int) -> torch.Tensor:
    """(B, Hq, n, D) -> (B, Hkv, G*n, D) fp32: each kv head's query group as one matrix."""
    b, hq, n, d = x.shape
    return x.float().reshape(b, hkv, hq // hkv * n, d)


def per_head(x: torch.Tensor, hkv: int) -> torch.Tensor:
    """A per-query-head vector (Hq,) viewed to broadcast over (B, Hkv, G, n, m) tiles."""
    return x.float().view(hkv, -1, 1, 1)


def dense_dots(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """fp32 q.k for every (query, key): (B, Hq, T, S)."""
    return q.float() @ expand_kv(k, q.shape[1]).float().transpose(-1, -2)


def cat_stats(parts: list[RowStats], b: int, hq: int, layer: int) -> RowStats:
    """Concatenate per-query-block statistics (B, Hkv, G, n) along the rows."""
    def cat(name: str) -> torch.Tensor:
        return torch.cat([getattr(p, name).reshape(b, hq, -1) for p in parts], dim=2)

    return RowStats(layer=layer, abs_sum=cat("abs_sum"), zeros=cat("zeros"), first=cat("first"),
                    entropy=cat("entropy"), visible=cat("visible"))


def empty_stats(b: int, hq: int, t: int, device: torch.device, layer: int) -> RowStats:
    z = torch.zeros(b, hq, t, device=device)
    return RowStats(layer=layer, abs_sum=z, zeros=z.clone(), first=z.clone(), entropy=z.clone(), visible=z.clone())


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
    parts: list[RowStats] = []
    for lo in range(0, t, block):
        hi = min(t, lo + block)
        n = hi - lo
        qbs = [group_rows(q[:, :, lo:hi], hkv) for q in qs]
        qpos = torch.arange(q_offset + lo, q_offset + hi, device=v.device)
        acc = torch.zeros(b, hkv, g * n, dv, device=v.device)
        st = StreamingStats((b, hkv, g, n), v.device) if collect_stats else None
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
            if st is not None:
                st.update(w, visible, klo)
        out[:, :, lo:hi] = acc.view(b, hq, n, dv).to(out.dtype)
        if st is not None:
            parts.append(st.finish(layer))
    if not collect_stats:
        return out, None
    return out, (cat_stats(parts, b, hq, layer) if parts else empty_stats(b, hq, 0, v.device, layer))


class NonSoftmaxLayer(AttentionLayer):
    """Layer of a non-softmax variant. A subclass implements the three paths on
    a dict of named tensors (q, k, v and, for tda, q2, k2):

    - `reference(q_offset, **t) -> (out, dense weights)`,
    - `chunked(q_offset, block, collect_stats, **t) -> (out, RowStats | None)`,
    - `triton(q_offset, collect_stats, **t) -> (out, RowStats | None)`,

    and optionally `finish(out, x)` (rela's gated norm)."""

    supports_positions: ClassVar[tuple[str, ...]] = ("rope", "nope")

    def build_projections(self) -> None:
        if self.position not in self.supports_positions:
            raise ConfigError(
                f"attention variant {self.variant!r} supports position {' or '.join(self.supports_positions)}, "
                f"not {self.position!r} (ALiBi/NAPE are implemented for the softmax family and entmax)"
            )
        if self.config.sliding_window is not None:
            raise ConfigError(
                f"attention variant {self.variant!r} has no sliding-window form; "
                "set sliding_window to null or use a softmax-family variant"
            )
        super().build_projections()

    def reference(self, q_offset: int, **t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def chunked(self, q_offset: int, block: int, collect_stats: bool, **t: torch.Tensor):
        raise NotImplementedError

    def triton(self, q_offset: int, collect_stats: bool, **t: torch.Tensor):
        raise NotImplementedError

    def finish(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return out

    def attend(self, ctx: AttentionContext, **t: torch.Tensor) -> torch.Tensor:
        """Run the backend `ctx` asks for; record weights/statistics when asked."""
        q, k = t["q"], t["k"]
        q_offset = k.shape[2] - q.shape[2]
        if ctx.backend == "reference" or ctx.return_weights:
            out, w = self.reference(q_offset, **t)
            if ctx.return_weights:
                ctx.weights.append(w)
            if ctx.collect_stats:
                visible = causal_mask(q.shape[2], k.shape[2], q_offset, q.device)
                ctx.stats.append(stats_from_weights(w, visible, self.layer))
            return out
        if ctx.backend == "triton":
            out, st = self.triton(q_offset, ctx.collect_stats, **t)
        else:
            out, st = self.chunked(q_offset, ctx.block_size, ctx.collect_stats, **t)
        if st is not None:
            ctx.stats.append(st)
        return out

    def core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: AttentionContext,
             x: torch.Tensor) -> torch.Tensor:
        return self.finish(self.attend(ctx, q=q, k=k, v=v), x)
