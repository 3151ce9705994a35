"""The entmax layer: alpha-entmax in place of softmax (see reference.py)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from checkpoints.attention.base import AttentionLayer
from checkpoints.attention.entmax.chunked import entmax_chunked
from checkpoints.attention.entmax.reference import check_alpha, entmax_reference, scale_queries


class EntmaxAttention(AttentionLayer):
    """alpha-entmax in place of softmax; `length_scaling` adds ASEntmax's
    per-head query scaling with learnable `as_beta`, `as_gamma`; ALiBi/NAPE
    positions as in the ASEntmax paper."""

    supports_window = False
    variant = "entmax"
    defaults: ClassVar[dict[str, Any]] = {"alpha": 1.5, "length_scaling": False, "as_beta": 0.0, "as_gamma": 1.0}

    def build_projections(self) -> None:
        super().build_projections()
        self.alpha = check_alpha(self.params["alpha"])
        if self.params["length_scaling"]:
            self.as_beta = nn.Parameter(torch.full((self.num_heads,), float(self.params["as_beta"])))
            self.as_gamma = nn.Parameter(torch.full((self.num_heads,), float(self.params["as_gamma"])))

    def _scaling(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        if not self.params["length_scaling"]:
            return None, None
        return self.as_beta, self.as_gamma

    def reference(self, q_offset, q, k, v):
        beta, gamma = self._scaling()
        return entmax_reference(q, k, v, q_offset, self.alpha, beta, gamma, slopes=self.alibi(q.device))

    def chunked(self, q_offset, block, collect_stats, q, k, v):
        beta, gamma = self._scaling()
        return entmax_chunked(q, k, v, q_offset, self.alpha, as_beta=beta, as_gamma=gamma, block=block,
                              collect_stats=collect_stats, layer=self.layer, slopes=self.alibi(q.device))

    def triton(self, q_offset, collect_stats, q, k, v):
        from checkpoints.attention.entmax.triton import entmax_attention

        beta, gamma = self._scaling()
        q = scale_queries(q, q_offset, beta.detach() if beta is not None else None,
                          gamma.detach() if gamma is not None else None)
        return entmax_attention(q, k, v, q_offset, self.alpha, slopes=self.alibi(q.device),
                                collect_stats=collect_stats, layer=self.layer)
