"""Integral attention (Kobyzev et al. 2025, "Integral Transformer: Denoising
Attention, Not Too Much Not Too Little"): q and k of a head are split into S
signals of width d/S, `z^s_ij = q^s_i . k^s_j / sqrt(d/S)`, and the weights are
`softmax_j(mean_s z^s_ij)`. RoPE is applied per signal (rotary dimension
d/S). S = `signals` (8 in the paper); the model config chooses the layers (the
paper: the top half).

The mean of the signals' logits is `q . k / sqrt(S d)` on the per-signal
rotated q and k, so the streaming paths are plain online softmax at that
scale; the reference keeps the paper's per-signal form."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch

from checkpoints.attention.base import AttentionContext
from checkpoints.attention.gqa import expand_kv
from checkpoints.attention.masks import causal_mask
from checkpoints.attention.position import alibi_bias
from checkpoints.attention.softmax.layer import SoftmaxFamilyLayer
from checkpoints.errors import ConfigError


def intg_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int, signals: int,
    slopes: torch.Tensor | None = None, window: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense integral attention: (out (B, Hq, T, D), weights (B, Hq, T, S))."""
    b, h, t, d = q.shape
    ds = d // signals
    kx, vx = expand_kv(k, h), expand_kv(v, h)
    qs = q.float().view(b, h, t, signals, ds).transpose(2, 3)  # (B, H, S, T, d/S)
    ks = kx.float().view(b, h, -1, signals, ds).transpose(2, 3)
    z = ((qs @ ks.transpose(-1, -2)) / math.sqrt(ds)).mean(dim=2)  # mean over signals
    if slopes is not None:
        z = z + alibi_bias(slopes, t, k.shape[2], q_offset)
    visible = causal_mask(t, k.shape[2], q_offset, q.device, window)
    w = torch.softmax(z.masked_fill(~visible, float("-inf")), dim=-1).nan_to_num(0.0)
    return (w @ vx.float()).to(q.dtype), w


class IntegralAttention(SoftmaxFamilyLayer):
    variant = "intg"
    defaults: ClassVar[dict[str, Any]] = {"signals": 8}

    def build_projections(self) -> None:
        s, d = int(self.params["signals"]), self.head_dim
        if s < 1 or d % s:
            raise ConfigError(f"intg (layer {self.layer}): head_dim {d} must be divisible by signals {s}")
        if self.position == "rope" and (self.config.rotary_dim // s) % 2:
            raise ConfigError(
                f"intg (layer {self.layer}): the per-signal rotary dimension rotary_dim/signals = "
                f"{self.config.rotary_dim}/{s} must be even; use fewer signals"
            )
        super().build_projections()

    def rotate(self, x: torch.Tensor, ctx: AttentionContext, dim: int | None = None) -> torch.Tensor:
        """RoPE per signal: (B, H, T, D) viewed as (B, H*S, T, D/S)."""
        if self.position != "rope":
            return x
        b, h, t, d = x.shape
        s = int(self.params["signals"])
        xs = x.view(b, h, t, s, d // s).transpose(2, 3).reshape(b, h * s, t, d // s)
        xs = super().rotate(xs, ctx, self.config.rotary_dim // s)
        return xs.view(b, h, s, t, d // s).transpose(2, 3).reshape(b, h, t, d)

    def logit_scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim * int(self.params["signals"]))

    def reference(self, q_offset, q, k, v):
        return intg_reference(q, k, v, q_offset, int(self.params["signals"]), self.alibi(q.device),
                              self.window)
