"""Rectified Linear Attention, ReLA (Zhang, Titov, Sennrich 2021, "Sparse
Attention with Linear Units", EMNLP):

    w_ij = ReLU(q_i . k_j / sqrt(d)),   o_i = sum_j w_ij v_j   (no normalisation)

and, since the unnormalised outputs vary in scale, the concatenated head
outputs go through a gated RMSNorm before o_proj:

    scale * x * rsqrt(mean(x^2) + 1e-8) * sigmoid(gate * x)

with `scale` and `gate` learnable vectors of the concatenated width
(checkpoint names `norm_scale`, init 1, and `norm_gate`, init 1). Weights are
final as soon as a score is known: the streaming paths take one pass."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from checkpoints.attention.base import AttentionLayer
from checkpoints.attention.pointwise.chunked import rela_chunked
from checkpoints.attention.pointwise.reference import rela_reference


def gated_rms_norm(x: torch.Tensor, scale: torch.Tensor, gate: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """`scale * x * rsqrt(mean(x^2) + eps) * sigmoid(gate * x)` over the last dim, in fp32."""
    xf = x.float()
    y = scale.float() * xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * torch.sigmoid(gate.float() * xf)
    return y.to(x.dtype)


class ReLAAttention(AttentionLayer):
    """ReLA with the gated RMSNorm of the concatenated heads."""

    variant = "rela"
    defaults: ClassVar[dict[str, Any]] = {"norm_eps": 1e-8}
    supports_positions = ("rope", "nope")
    supports_window = False

    def build_projections(self) -> None:
        super().build_projections()
        width = self.num_heads * self.head_dim
        self.norm_scale = nn.Parameter(torch.ones(width))
        self.norm_gate = nn.Parameter(torch.ones(width))

    def reference(self, q_offset, q, k, v):
        return rela_reference(q, k, v, q_offset)

    def chunked(self, q_offset, block, collect_stats, q, k, v):
        return rela_chunked(q, k, v, q_offset, block=block, collect_stats=collect_stats, layer=self.layer)

    def triton(self, q_offset, collect_stats, q, k, v):
        from checkpoints.attention.pointwise import triton as kernels

        return kernels.rela_attention(q, k, v, q_offset, collect_stats=collect_stats, layer=self.layer)

    def finish(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        b, hq, t, dv = out.shape
        cat = out.transpose(1, 2).reshape(b, t, hq * dv)
        normed = gated_rms_norm(cat, self.norm_scale, self.norm_gate, float(self.params["norm_eps"]))
        return normed.view(b, t, hq, dv).transpose(1, 2)
