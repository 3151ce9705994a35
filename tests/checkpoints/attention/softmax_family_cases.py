"""Shared helpers for the softmax-family tests: tiny layers of each variant,
run through a KV cache on any backend, and the agreement bound of
docs/protocols/attention.md (max abs error <= 1e-5 relative to the output scale)."""

from __future__ import annotations

import torch

from checkpoints.attention.base import AttentionContext
from checkpoints.attention.registry import build_attention
from checkpoints.config import AttentionConfig, ModelConfig
from checkpoints.kv.cache import KVCache
from checkpoints.rope import Rotary
from tests.helpers import softmax_family_variants

VARIANTS = softmax_family_variants()  # from the registry: a new softmax-family variant is tested here


def make_config(variant: str, head_dim: int = 32, position: str = "rope", heads: int = 4, kv_heads: int = 1,
                window: int | None = None) -> ModelConfig:
    params = {"signals": 4} if variant == "intg" else {}
    return ModelConfig(
        hidden_size=64, num_layers=1, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim,
        intermediate_size=64, vocab_size=259, sliding_window=window,
        attention=AttentionConfig(variant=variant, params=params, position=position),
    )


def make_layer(config: ModelConfig, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    layer = build_attention(config, 0).eval()
    with torch.no_grad():  # non-trivial values for the parameters that start constant
        for name, p in layer.named_parameters():
            if name in ("ssmax_s", "norm_weight"):
                p.uniform_(0.5, 1.5)
    return layer


def run_chunks(layer, config: ModelConfig, x: torch.Tensor, chunks: list[int], backend: str,
               block: int = 32, collect_stats: bool = False):
    """Feed x (B, N, hidden) through the layer in consecutive chunks over one
    KV cache; returns (outputs concatenated, per-chunk stats)."""
    rotary = Rotary(config)
    rotary.set_length(x.shape[1])
    cache = KVCache(1)
    outs, stats, start = [], [], 0
    for n in chunks:
        ctx = AttentionContext(rotary=rotary, start=start, backend=backend, block_size=block,
                               collect_stats=collect_stats)
        with torch.no_grad():
            outs.append(layer(x[:, start:start + n], ctx, cache.layers[0]))
        stats.extend(ctx.stats)
        start += n
    return torch.cat(outs, dim=1), stats


def assert_close(out: torch.Tensor, ref: torch.Tensor, rel: float = 1e-5) -> None:
    assert not torch.isnan(out).any(), "NaN in output (a missed write?)"
    scale = ref.abs().max().item()
    err = (out.float() - ref.float()).abs().max().item()
    assert err <= rel * max(scale, 1e-6), f"max abs error {err:.3g} > {rel} x output scale {scale:.3g}"


STAT_FIELDS = ("abs_sum", "zeros", "first", "entropy", "visible")


def assert_stats_close(got, want, tol: float = 1e-5) -> None:
    assert got.layer == want.layer
    for f in STAT_FIELDS:
        a, b = getattr(got, f), getattr(want, f)
        assert a.shape == b.shape, f
        assert not torch.isnan(a).any(), f"NaN in {f}"
        if f in ("zeros", "visible"):
            assert torch.equal(a, b), f"{f} differs"
        else:
            err = (a - b).abs().max().item()
            assert err <= tol, f"{f}: max abs error {err:.3g}"
