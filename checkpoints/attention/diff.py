"""Differential attention (Ye et al. 2025, "Differential Transformer", ICLR 2025,
arXiv:2410.05258).

Each head has two q/k halves of width d (= config.head_dim) and a value of
width 2d: `out_h = RMSNorm_2d((softmax(z1) - lam * softmax(z2)) v) * (1 - lam_init)`
with `lam = exp(lam_q1 . lam_k1) - exp(lam_q2 . lam_k2) + lam_init`,
`lam_init = 0.8 - 0.6 exp(-0.3 * layer)` (0-based layer), one lam per layer,
RMSNorm eps 1e-5 with a weight shared across heads.

Layout as in the official code: q_proj gives 2*H heads of width d (head 2h is
q1 of head h, 2h+1 its q2), k_proj 2*Hkv heads, v_proj Hkv heads of width 2d,
o_proj takes H*2d. With grouped-query attention query head h reads kv head
h // (H/Hkv) for both k1 (2g) and k2 (2g+1). The paper halves the number of
heads to match a softmax model's parameters: set num_heads accordingly.
Checkpoint names: `lambda_q1`, `lambda_k1`, `lambda_q2`, `lambda_k2` (d,),
`norm_weight` (2d,)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from checkpoints.attention.base import AttentionContext, register
from checkpoints.attention.cache import LayerCache
from checkpoints.attention.softmax import (
    SoftmaxFamilyLayer,
    causal_mask,
    dense_logits,
    expand_kv,
    family_stats_chunked,
    fused_path_applies,
    online_softmax_chunked,
    softmax_sdpa_streaming,
)
from checkpoints.attention.stats import stats_from_weights

NORM_EPS = 1e-5


def lambda_init(layer: int) -> float:
    return 0.8 - 0.6 * math.exp(-0.3 * layer)


def diff_norm(attn: torch.Tensor, weight: torch.Tensor, lam_init: float) -> torch.Tensor:
    """Per-head RMSNorm over 2d (fp32) times the weight, times (1 - lam_init)."""
    a = attn.float()
    a = a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + NORM_EPS)
    return a * weight.float() * (1.0 - lam_init)


def diff_reference(
    q1: torch.Tensor, k1: torch.Tensor, q2: torch.Tensor, k2: torch.Tensor, v: torch.Tensor,
    q_offset: int, lam: float | torch.Tensor, slopes: torch.Tensor | None = None, window: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense `(softmax(z1) - lam softmax(z2)) v` before the norm:
    (out (B, H, T, 2d) fp32, weights (B, H, T, S))."""
    scale = 1.0 / math.sqrt(q1.shape[-1])
    a1, _, _ = dense_logits(q1, k1, q_offset, scale, slopes, window)
    a2, _, _ = dense_logits(q2, k2, q_offset, scale, slopes, window)
    w = torch.softmax(a1, -1).nan_to_num(0.0) - lam * torch.softmax(a2, -1).nan_to_num(0.0)
    return w @ expand_kv(v, q1.shape[1]).float(), w


@register
class DiffAttention(SoftmaxFamilyLayer):
    variant = "diff"
    defaults: ClassVar[dict[str, Any]] = {}

    def build_projections(self) -> None:
        c, d = self.config, self.head_dim
        self.q_proj = nn.Linear(c.hidden_size, self.num_heads * 2 * d, bias=c.qkv_bias)
        self.k_proj = nn.Linear(c.hidden_size, self.num_kv_heads * 2 * d, bias=c.qkv_bias)
        self.v_proj = nn.Linear(c.hidden_size, self.num_kv_heads * 2 * d, bias=c.qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * 2 * d, c.hidden_size, bias=getattr(c, "o_bias", False))
        self.lam_init = lambda_init(self.layer)
        for name in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
            setattr(self, name, nn.Parameter(torch.randn(d) * 0.1))
        self.norm_weight = nn.Parameter(torch.ones(2 * d))

    def lam(self) -> torch.Tensor:
        """0-dim fp32 lam; keeps its gradient, so the torch paths train the lambda vectors."""
        l1 = torch.exp((self.lambda_q1.float() * self.lambda_k1.float()).sum())
        l2 = torch.exp((self.lambda_q2.float() * self.lambda_k2.float()).sum())
        return l1 - l2 + self.lam_init

    def forward(self, x: torch.Tensor, ctx: AttentionContext, cache: LayerCache | None) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.rotate(self.split_heads(self.q_proj(x), 2 * self.num_heads), ctx)  # (B, 2H, T, d)
        k = self.rotate(self.split_heads(self.k_proj(x), 2 * self.num_kv_heads), ctx)  # (B, 2Hkv, T, d)
        v = self.split_heads(self.v_proj(x), self.num_kv_heads)  # (B, Hkv, T, 2d)
        kv = cache.append(k=k, v=v) if cache is not None else {"k": k, "v": v}
        out = self.by_rows(ctx, lambda q, x, k, v: self.core(q, k, v, ctx, x), {"q": q, "x": x}, kv)  # (B, H, T, 2d)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))

    def core(self, q, k, v, ctx, x):
        q1, q2, k1, k2 = q[:, 0::2], q[:, 1::2], k[:, 0::2], k[:, 1::2]
        q_offset = k.shape[2] - q.shape[2]
        window = self.config.sliding_window
        slopes = self.alibi(q.device)
        lam = self.lam()
        lam_f = float(lam.detach())  # statistics and kernels take a number
        scale = 1.0 / math.sqrt(self.head_dim)
        if ctx.backend == "reference" or ctx.return_weights:
            attn, w = diff_reference(q1, k1, q2, k2, v, q_offset, lam, slopes, window)
            if ctx.return_weights:
                ctx.weights.append(w)
            if ctx.collect_stats:
                visible = causal_mask(q.shape[2], k.shape[2], q_offset, q.device, window)
                ctx.stats.append(stats_from_weights(w, visible, self.layer))
        else:
            kw = dict(scale=scale, slopes=slopes, window=window)
            if ctx.backend == "triton":
                from checkpoints.attention import triton_softmax_family as tk

                o1, m1, l1 = tk.attention(q1, k1, v, q_offset, **kw)
                o2, m2, l2 = tk.attention(q2, k2, v, q_offset, **kw)
                if ctx.collect_stats:
                    terms = [(1.0, q1, k1, m1, l1), (-lam_f, q2, k2, m2, l2)]
                    ctx.stats.append(tk.row_stats(terms, q_offset, layer=self.layer, **kw))
            elif not ctx.collect_stats and fused_path_applies(q1, q_offset, slopes, window, False):
                # The fused CPU kernel wants v as wide as q: run it on each half of the 2d value.
                halves = v.split(self.head_dim, dim=-1)
                o1 = torch.cat([softmax_sdpa_streaming(q1, k1, h, q_offset, scale=scale) for h in halves], -1)
                o2 = torch.cat([softmax_sdpa_streaming(q2, k2, h, q_offset, scale=scale) for h in halves], -1)
            else:
                o1, m1, l1 = online_softmax_chunked(q1, k1, v, q_offset, block=ctx.block_size, **kw)
                o2, m2, l2 = online_softmax_chunked(q2, k2, v, q_offset, block=ctx.block_size, **kw)
                if ctx.collect_stats:
                    terms = [(1.0, q1, k1, m1, l1), (-lam_f, q2, k2, m2, l2)]
                    ctx.stats.append(family_stats_chunked(terms, q_offset, k.shape[2], block=ctx.block_size,
                                                          layer=self.layer, **kw))
            attn = o1.float() - lam * o2.float()
        return diff_norm(attn, self.norm_weight, self.lam_init).to(q.dtype)
