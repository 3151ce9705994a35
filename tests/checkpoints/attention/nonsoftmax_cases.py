"""Shared helpers for the non-softmax variant tests (softpick, rela, tra, tda,
entmax): random q/k/v, tiny layers of each variant, and the cases every
implementation must agree on (odd lengths, GQA 4:1, query offsets)."""

from __future__ import annotations

from typing import Any

import torch

from checkpoints.attention.registry import build_attention
from checkpoints.config import AttentionConfig, ModelConfig
from tests.helpers import other_family_variants

NONSOFTMAX = other_family_variants()  # from the registry: a new family is tested here

# (T queries, S keys): a full prefill, odd lengths, a second prefill chunk, a decode row.
SHAPES = [(1, 1), (63, 63), (130, 130), (70, 130), (1, 130)]


def qkv(t: int, s: int, d: int, hq: int = 4, hkv: int = 1, seed: int = 0, device: str = "cpu",
        scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mk = lambda h, n: (scale * torch.randn(1, h, n, d, generator=g)).to(device)  # noqa: E731
    return mk(hq, t), mk(hkv, s), mk(hkv, s)


def make_config(variant: str, head_dim: int = 32, params: dict[str, Any] | None = None, heads: int = 4,
                kv_heads: int = 1, position: str = "rope") -> ModelConfig:
    return ModelConfig(
        hidden_size=64, num_layers=1, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        intermediate_size=64, vocab_size=259,
        attention=AttentionConfig(variant=variant, params=dict(params or {}), position=position),
    )


def make_layer(config: ModelConfig, seed: int = 0) -> torch.nn.Module:
    """A layer with non-trivial values in the parameters that start constant."""
    torch.manual_seed(seed)
    layer = build_attention(config, 0).eval()
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name in ("beta",):
                p.uniform_(0.2, 1.5)
            elif name in ("lam",):
                p.fill_(0.37)
            elif name.endswith("_gain") or name in ("norm_scale", "norm_gate"):
                p.uniform_(0.5, 1.5)
            elif name in ("as_beta", "as_gamma"):
                p.uniform_(0.1, 0.6)
    return layer


STAT_FIELDS = ("abs_sum", "zeros", "first", "entropy", "visible")


def assert_stats_close(got, want, tol: float = 1e-5) -> None:
    """Streaming statistics vs those of the reference weights: counts exactly,
    the rest within `tol` relative to the field's scale (unnormalised variants,
    rela and tra, have sums of |w| far above 1)."""
    assert got.layer == want.layer
    for f in STAT_FIELDS:
        a, b = getattr(got, f), getattr(want, f)
        assert a.shape == b.shape, f
        assert not torch.isnan(a).any(), f"NaN in {f}"
        if f in ("zeros", "visible"):
            assert torch.equal(a, b), f"{f} differs"
        else:
            err = (a - b).abs().max().item() if a.numel() else 0.0
            scale = max(1.0, b.abs().max().item() if b.numel() else 0.0)
            assert err <= tol * scale, f"{f}: max abs error {err:.3g} (scale {scale:.3g})"
