"""RMSNorm (Zhang & Sennrich 2019) in the two forms the families use."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class RMSNorm(nn.Module):
    """`x / rms(x) * w` over the last dim, normalised in fp32 like the reference
    implementations. Llama casts back before scaling; with `unit_offset`
    (Gemma) the scale is `1 + w` (initialised at w = 0), applied in fp32."""

    def __init__(self, dim: int, eps: float, unit_offset: bool = False) -> None:
        super().__init__()
        self.eps = eps
        self.unit_offset = unit_offset
        self.weight = nn.Parameter(torch.zeros(dim) if unit_offset else torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x * rsqrt(mean(x^2) + eps) in fp32: one fused kernel on CUDA (five eager ones spelled out),
        # the same arithmetic on the CPU
        xf = F.rms_norm(x.float(), (x.shape[-1],), eps=self.eps)
        if self.unit_offset:
            return (xf * (1.0 + self.weight.float())).to(x.dtype)
        return self.weight * xf.to(x.dtype)
