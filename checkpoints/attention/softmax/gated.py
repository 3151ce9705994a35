"""Gated attention (Qiu et al. 2025, "Gated Attention for Large Language Models:
Non-linearity, Sparsity, and Attention-Sink-Free", arXiv:2505.06708): the
softmax attention output of each head is multiplied elementwise by
`sigmoid(x W_g)` (the paper's G1 position: after SDPA, head-specific,
computed from the layer input x), before o_proj. `W_g` is `gate_proj.weight`
(heads*d x hidden)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from checkpoints.attention.softmax.layer import SoftmaxFamilyLayer


class GatedAttention(SoftmaxFamilyLayer):
    variant = "gated"
    defaults: ClassVar[dict[str, Any]] = {}
    supports_logit_options = True  # the softmax's reference, chunked and Triton paths, then the gate

    def build_projections(self) -> None:
        super().build_projections()
        self.gate_proj = nn.Linear(self.config.hidden_size, self.num_heads * self.head_dim, bias=False)

    def finish(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """out (B, H, T, D) * sigmoid(x W_g) viewed per head."""
        gate = torch.sigmoid(self.split_heads(self.gate_proj(x), self.num_heads).float())
        return (out.float() * gate).to(out.dtype)
