"""Cog attention (Lv et al. 2024, "More Expressive Attention with Negative
Weights", arXiv:2411.07176): `w_ij = sign(z_ij) * softmax_j(|z_ij|)`, the
causal mask applied to |z| before the softmax; no parameters. The model
config chooses the layers (the paper keeps the first and last softmax).

With ALiBi (position alibi/nape) the distance bias is added to |z|, so it
keeps its meaning of lowering the magnitude of far keys' weights."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from checkpoints.attention.gqa import expand_kv
from checkpoints.attention.softmax.layer import SoftmaxFamilyLayer
from checkpoints.attention.softmax.reference import dense_logits


def cog_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int, scale: float | None = None,
    slopes: torch.Tensor | None = None, window: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense cog attention: (out (B, Hq, T, D), signed weights (B, Hq, T, S))."""
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    abs_z, sign, _ = dense_logits(q, k, q_offset, scale, slopes, window, signed=True)
    w = sign * torch.softmax(abs_z, dim=-1).nan_to_num(0.0)
    return (w @ expand_kv(v, q.shape[1]).float()).to(q.dtype), w


class CogAttention(SoftmaxFamilyLayer):
    variant = "cog"
    defaults: ClassVar[dict[str, Any]] = {}
    signed = True

    def reference(self, q_offset, q, k, v):
        return cog_reference(q, k, v, q_offset, self.logit_scale(), self.alibi(q.device), self.window)
