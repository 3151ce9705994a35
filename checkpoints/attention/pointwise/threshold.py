"""Threshold attention (tra) and Threshold Differential Attention (tda)
(Huang et al. 2026, "Threshold Differential Attention"):

- q and k are RMS-normalised per head (optional learned gain, 1 by default)
  and `s_ij = qn_i . kn_j / d`, the cosine of q_i and k_j with unit gain;
- the threshold grows with the absolute position i of the query,
  `tau_i = beta * sqrt(2 ln(i + 1) / d)` (0 at position 0);
- tra: `w_ij = ReLU(s_ij - tau_i)^p`, `out_i = sum_j w_ij v_j` — no
  normalisation of the weights or of the output;
- tda: two independent q/k projections (full head width each) and one shared
  v, `out = TRA(q1, k1, v) - lam * TRA(q2, k2, v)`, `lam = clamp(lam_param, 0, 1)`
  as in the public kernel.

Defaults from the paper: beta 1.0, p 2. `beta` is a learnable scalar (or a
per-head vector with `beta_per_head`); tda's `lam` is learnable (init `lam`,
0.5 by default). Keys are cached after normalisation and RoPE, so decoding
never renormalises the cache. The public kernel has no decode path; here the
absolute query position always enters tau, so chunked prefill and decode over
a cache give the same rows as one full prefill."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import nn

from checkpoints.attention.base import AttentionContext, AttentionLayer
from checkpoints.attention.pointwise.chunked import threshold_chunked
from checkpoints.attention.pointwise.reference import tda_reference, tra_reference
from checkpoints.errors import ConfigError
from checkpoints.kv.cache import LayerCache


def rms_normalize(x: torch.Tensor, gain: torch.Tensor | None, eps: float) -> torch.Tensor:
    """Per-head RMSNorm over the last dim, in x's dtype (computed in fp32)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if gain is not None:
        y = y * gain.float()
    return y.to(x.dtype)


class _ThresholdBase(AttentionLayer):
    """Shared projections and parameters of tra and tda."""

    defaults: ClassVar[dict[str, Any]] = {
        "beta": 1.0, "p": 2.0, "beta_per_head": False, "learn_gain": False, "norm_eps": 1e-6,
    }
    supports_positions = ("rope", "nope")
    supports_window = False
    supports_qk_norm = False  # q and k are RMS-normalised by the variant itself (cosine similarity)
    pairs: ClassVar[tuple[str, ...]] = ("",)  # suffixes of the q/k pairs: "" and "2" for tda

    def build_projections(self) -> None:
        super().build_projections()
        if float(self.params["p"]) <= 0:
            raise ConfigError(f"{self.variant}: p must be positive, got {self.params['p']}")
        c, d = self.config, self.head_dim
        heads = self.num_heads if self.params["beta_per_head"] else 1
        self.beta = nn.Parameter(torch.full((heads,), float(self.params["beta"])))
        for sfx in self.pairs:
            if sfx:
                setattr(self, f"q{sfx}_proj", nn.Linear(c.hidden_size, self.num_heads * d, bias=c.qkv_bias))
                setattr(self, f"k{sfx}_proj", nn.Linear(c.hidden_size, self.num_kv_heads * d, bias=c.qkv_bias))
            if self.params["learn_gain"]:
                setattr(self, f"q{sfx}_gain", nn.Parameter(torch.ones(d)))
                setattr(self, f"k{sfx}_gain", nn.Parameter(torch.ones(d)))

    def beta_heads(self) -> torch.Tensor:
        """beta as a (Hq,) fp32 vector (a scalar beta is shared by every head); keeps
        its gradient, so the torch/reference paths train it."""
        return self.beta.float().expand(self.num_heads)

    def project(self, x: torch.Tensor, ctx: AttentionContext, sfx: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised, rotated q and k of one pair."""
        eps = float(self.params["norm_eps"])
        gq = getattr(self, f"q{sfx}_gain", None)
        gk = getattr(self, f"k{sfx}_gain", None)
        q = self.split_heads(getattr(self, f"q{sfx}_proj")(x), self.num_heads)
        k = self.split_heads(getattr(self, f"k{sfx}_proj")(x), self.num_kv_heads)
        q = self.rotate(rms_normalize(q, gq, eps), ctx)
        k = self.rotate(rms_normalize(k, gk, eps), ctx)
        return q, k

    def forward(self, x: torch.Tensor, ctx: AttentionContext, cache: LayerCache | None) -> torch.Tensor:
        b, t, _ = x.shape
        t_in: dict[str, torch.Tensor] = {}
        for sfx in self.pairs:
            t_in[f"q{sfx}"], t_in[f"k{sfx}"] = self.project(x, ctx, sfx)
        t_in["v"] = self.split_heads(self.v_proj(x), self.num_kv_heads)
        if cache is not None:
            stored = self.cached(ctx, cache, t, **{name: x_ for name, x_ in t_in.items() if not name.startswith("q")})
            t_in.update(stored)
        out = self.attend(ctx, **t_in)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class ThresholdAttention(_ThresholdBase):
    """TRA: `ReLU(cos(q_i, k_j) - tau_i)^p`, unnormalised."""

    variant = "tra"

    def reference(self, q_offset, q, k, v):
        return tra_reference(q, k, v, q_offset, self.beta_heads(), float(self.params["p"]))

    def chunked(self, q_offset, block, collect_stats, q, k, v):
        return threshold_chunked([q], [k], v, q_offset, self.beta_heads(), float(self.params["p"]),
                                 block=block, collect_stats=collect_stats, layer=self.layer)

    def triton(self, q_offset, collect_stats, q, k, v):
        from checkpoints.attention.pointwise import triton as kernels

        return kernels.threshold_attention([q], [k], v, q_offset, self.beta_heads(),
                                                    float(self.params["p"]), collect_stats=collect_stats,
                                                    layer=self.layer)


class ThresholdDifferentialAttention(_ThresholdBase):
    """TDA: `TRA(q1, k1, v) - lam * TRA(q2, k2, v)` with `lam = clamp(lam_param, 0, 1)`."""

    variant = "tda"
    defaults: ClassVar[dict[str, Any]] = {**_ThresholdBase.defaults, "lam": 0.5}
    pairs = ("", "2")

    def build_projections(self) -> None:
        super().build_projections()
        self.lam = nn.Parameter(torch.tensor([float(self.params["lam"])]))

    def lam_value(self) -> torch.Tensor:
        """`clamp(lam, 0, 1)` as a (1,) tensor (differentiable inside the range)."""
        return self.lam.float().clamp(0.0, 1.0)

    def reference(self, q_offset, q, k, q2, k2, v):
        return tda_reference(q, k, q2, k2, v, q_offset, self.beta_heads(), self.lam_value(), float(self.params["p"]))

    def chunked(self, q_offset, block, collect_stats, q, k, q2, k2, v):
        return threshold_chunked([q, q2], [k, k2], v, q_offset, self.beta_heads(), float(self.params["p"]),
                                 self.lam_value(), block=block, collect_stats=collect_stats, layer=self.layer)

    def triton(self, q_offset, collect_stats, q, k, q2, k2, v):
        from checkpoints.attention.pointwise import triton as kernels

        return kernels.threshold_attention([q, q2], [k, k2], v, q_offset, self.beta_heads(),
                                                    float(self.params["p"]), self.lam_value(),
                                                    collect_stats=collect_stats, layer=self.layer)
