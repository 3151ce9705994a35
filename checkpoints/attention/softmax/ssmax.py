"""Scalable-Softmax attention (Nakanishi 2025, "Scalable-Softmax Is Superior for
Attention", arXiv:2501.19399): `softmax_j(s_h * log(n_i) * z_ij)`.

n_i is the number of keys row i sees, `i + 1` for the 0-based absolute position i
(the softpick paper's appendix B: "n is a vector which assigns ... the corresponding
sequence length for each row"), so the first row's factor is log 1 = 0 (its one key
gets weight 1 whatever the factor). The offset is the `log_offset` hyper-parameter
(default 1; lctx defaulted to 2 before, which the paper does not use: a checkpoint
trained that way sets `log_offset: 2` in its attention params; results record the
resolved value). `s` is learnable per head
(checkpoint name `ssmax_s`, init `s_init` = 0.3). The streaming paths fold the
per-row factor into q, which leaves the rest of online softmax unchanged."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn

from checkpoints.attention.gqa import dense_dots, expand_kv
from checkpoints.attention.masks import causal_mask
from checkpoints.attention.position import alibi_bias
from checkpoints.attention.softmax.layer import SoftmaxFamilyLayer


def ssmax_factor(s: torch.Tensor, q_offset: int, t: int, log_offset: float) -> torch.Tensor:
    """(H, T) fp32: `s_h * log(i + log_offset)` for absolute positions i."""
    pos = torch.arange(q_offset, q_offset + t, device=s.device, dtype=torch.float32)
    return s.float()[:, None] * torch.log(pos + log_offset)[None, :]


def ssmax_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int, s: torch.Tensor,
    log_offset: float = 1.0, slopes: torch.Tensor | None = None, window: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense SSMax: (out (B, Hq, T, D), weights (B, Hq, T, S)); s (Hq,)."""
    z = dense_dots(q, k) / math.sqrt(q.shape[-1])
    z = ssmax_factor(s, q_offset, q.shape[2], log_offset)[None, :, :, None] * z
    if slopes is not None:
        z = z + alibi_bias(slopes, q.shape[2], k.shape[2], q_offset)
    visible = causal_mask(q.shape[2], k.shape[2], q_offset, q.device, window)
    w = torch.softmax(z.masked_fill(~visible, float("-inf")), dim=-1).nan_to_num(0.0)
    return (w @ expand_kv(v, q.shape[1]).float()).to(q.dtype), w


class SSMaxAttention(SoftmaxFamilyLayer):
    variant = "ssmax"
    defaults: ClassVar[dict[str, Any]] = {"log_offset": 1.0, "s_init": 0.3}

    def build_projections(self) -> None:
        super().build_projections()
        self.ssmax_s = nn.Parameter(torch.full((self.num_heads,), float(self.params["s_init"])))

    def scale_queries(self, q: torch.Tensor, q_offset: int) -> torch.Tensor:
        # Not detached: the torch paths train `s` (demo checkpoints).
        f = ssmax_factor(self.ssmax_s, q_offset, q.shape[2], self.params["log_offset"])
        return (q.float() * f[None, :, :, None]).to(q.dtype)

    def reference(self, q_offset, q, k, v):
        return ssmax_reference(q, k, v, q_offset, self.ssmax_s, self.params["log_offset"], self.alibi(q.device),
                               self.window)
