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

from checkpoints.attention.gqa import expand_kv
from checkpoints.attention.softmax.chunked import Term
from checkpoints.attention.softmax.layer import SoftmaxFamilyLayer
from checkpoints.attention.softmax.reference import dense_logits

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


class DiffAttention(SoftmaxFamilyLayer):
    variant = "diff"
    defaults: ClassVar[dict[str, Any]] = {}
    qk_heads_per_head = 2  # q is (B, 2H, T, d), k (B, 2Hkv, S, d); v (B, Hkv, S, 2d)

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

    def reference(self, q_offset, q, k, v):
        return diff_reference(q[:, 0::2], k[:, 0::2], q[:, 1::2], k[:, 1::2], v, q_offset, self.lam(),
                              self.alibi(q.device), self.window)

    def terms(self, q_offset: int, q: torch.Tensor, k: torch.Tensor) -> list[Term]:
        """softmax(z1) and softmax(z2); lam stays a device scalar (only the statistics use
        it: reading it back would synchronise every layer of every step)."""
        return [(1.0, q[:, 0::2], k[:, 0::2]), (-self.lam().detach(), q[:, 1::2], k[:, 1::2])]

    def combine(self, outs: list[torch.Tensor]) -> torch.Tensor:
        return outs[0].float() - self.lam() * outs[1].float()

    def finish(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """(B, H, T, 2d) fp32 difference -> per-head RMSNorm, in x's dtype."""
        return diff_norm(out, self.norm_weight, self.lam_init).to(x.dtype)
