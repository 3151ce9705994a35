"""The layer of the online-softmax family, and plain softmax attention
(Vaswani et al. 2017) as in Llama, Mistral and Qwen2.

A variant is a small subclass: it sets `signed`, overrides `logit_scale`,
`scale_queries` (per-row factors folded into q), `reference` (its paper's
dense formula), `finish` (output gating or norms), or for several softmaxes
`terms` and `combine` (diff). The streaming and Triton paths are shared.

Shapes: q (B, Hq, T, D); k, v (B, Hkv, S, D)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from checkpoints.attention.backend import Backend
from checkpoints.attention.base import AttentionContext, AttentionLayer
from checkpoints.attention.softmax import chunked
from checkpoints.attention.softmax.chunked import Term
from checkpoints.attention.softmax.reference import Logits, softmax_reference
from checkpoints.attention.stats import RowStats


class SoftmaxFamilyLayer(AttentionLayer):
    """Shared implementations of the online-softmax variants."""

    signed: ClassVar[bool] = False

    def logit_scale(self) -> float:
        """The q.k multiplier: `config.logit_scale` (1/sqrt(head_dim) unless the family sets one)."""
        return self.scale

    def scale_queries(self, q: torch.Tensor, q_offset: int) -> torch.Tensor:
        return q

    def terms(self, q_offset: int, q: torch.Tensor, k: torch.Tensor) -> list[Term]:
        """The softmaxes to run, (coef, q, k) each, whose outputs `combine` mixes
        and whose weights `sum coef * p` the statistics describe: one by default."""
        return [(1.0, self.scale_queries(q, q_offset), k)]

    def combine(self, outs: list[torch.Tensor]) -> torch.Tensor:
        return outs[0]

    def logits(self, device: torch.device) -> Logits:
        return Logits(self.logit_scale(), self.alibi(device), self.window, self.signed, self.softcap)

    def reference(self, q_offset: int, q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return softmax_reference(q, k, v, q_offset, self.logit_scale(), self.window,
                                 self.alibi(q.device), self.softcap)

    def chunked(self, q_offset: int, block: int, collect_stats: bool, q: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor) -> tuple[torch.Tensor, RowStats | None]:
        outs, stats = chunked.family_attention(self.terms(q_offset, q, k), v, q_offset, self.logits(q.device),
                                               block=block, collect_stats=collect_stats, layer=self.layer)
        return self.combine(outs), stats

    def ragged_step(self, ctx: AttentionContext, **t: torch.Tensor) -> torch.Tensor | None:
        """A ragged decode step in one call when the queries need no per-row rescaling
        (`scale_queries` not overridden: not ssmax): on Triton the decode kernel takes
        each row's position, every term (diff's two, cog's sign) included; on the torch
        backend each unsigned term is one masked SDPA call (one query per row, or the
        several of a draft being verified: on Triton too, whose decode kernel takes one
        query per row). Otherwise None: row by row."""
        if ctx.collect_stats or ctx.return_weights:
            return None
        q, k, v = t["q"], t["k"], t["v"]
        if not isinstance(k, torch.Tensor):  # rows of the paged pool (`PagedRows`): views, one row at a time
            return self.paged_rows_step(ctx, q, k, v)
        if not self.one_call_ragged_step(ctx.backend):
            return None
        if ctx.pages is not None and self.reads_pages(ctx, q.shape[2]):  # k, v: the pool's tensors
            from checkpoints.attention.softmax import triton as kernels

            out, _, _ = kernels.decode_paged(q, k, v, ctx.pages, ctx.row_positions, **self.logits(q.device)._asdict())
            return self.combine([out])
        if ctx.backend is Backend.TRITON and q.shape[2] == 1:  # the decode kernel takes one query per row
            from checkpoints.attention.softmax import triton as kernels

            outs, _ = kernels.family_attention(self.terms(0, q, k), v, ctx.row_positions, self.logits(q.device))
            return self.combine(outs)
        if not self.signed and (ctx.backend is Backend.TORCH or q.shape[2] > 1):  # Triton: a draft verified
            kw = dict(scale=self.logit_scale(), slopes=self.alibi(q.device), window=self.window,
                      softcap=self.softcap)
            return self.combine([chunked.ragged_decode_sdpa(tq, tk, v, ctx.row_positions, **kw)
                                 for _, tq, tk in self.terms(0, q, k)])
        return None

    def paged_rows_step(self, ctx: AttentionContext, q: torch.Tensor, k: Any, v: Any) -> torch.Tensor:
        """A ragged step over rows of the paged pool on the PyTorch backends: each row's
        terms on its own keys (a view of the pool), as `chunked` runs one sequence's step
        (its own positions: ssmax's log n, ALiBi, windows), without `attend`'s dispatch
        around every row."""
        t = q.shape[2]
        logits = self.logits(q.device)
        outs = []
        for b, n in enumerate(ctx.row_key_lengths(t)):
            out, _ = chunked.family_attention(self.terms(n - t, q[b : b + 1], k.row(b, n)), v.row(b, n), n - t,
                                              logits, block=ctx.block_size)
            outs.append(self.combine(out))
        return torch.cat(outs)

    def one_call_ragged_step(self, backend: Backend) -> bool:
        if type(self).scale_queries is not SoftmaxFamilyLayer.scale_queries:
            return False
        return backend is Backend.TRITON or (backend is Backend.TORCH and not self.signed)

    def reads_pages(self, ctx: AttentionContext, queries: int) -> bool:
        """On Triton, a one-token step of a one-softmax variant (not diff, whose terms split
        the keys; not ssmax) runs `decode_paged` on the pool: nothing gathered."""
        return (ctx.backend is Backend.TRITON and queries == 1 and not ctx.collect_stats
                and not ctx.return_weights and self.one_call_ragged_step(ctx.backend)
                and type(self).terms is SoftmaxFamilyLayer.terms)

    def triton(self, q_offset: int, collect_stats: bool, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> tuple[torch.Tensor, RowStats | None]:
        from checkpoints.attention.softmax import triton as kernels

        outs, stats = kernels.family_attention(self.terms(q_offset, q, k), v, q_offset, self.logits(q.device),
                                               collect_stats=collect_stats, layer=self.layer)
        return self.combine(outs), stats


class SoftmaxAttention(SoftmaxFamilyLayer):
    """softmax_j(q.k / sqrt(d)) v (Vaswani et al. 2017); with the family's scale and
    softcap (Gemma 2), softmax_j(c tanh(s q.k / c)) v."""

    variant = "softmax"
    defaults: ClassVar[dict[str, Any]] = {}
    supports_logit_options = True
