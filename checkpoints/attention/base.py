"""The attention seam: a registry of variants and the layer they all extend.

A variant subclasses `AttentionLayer`, sets `variant`, and overrides what
differs: its projections (`__init__`), its positional treatment, or its
`core` (the map from q, k, v to the per-head output)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from checkpoints.attention.cache import LayerCache
from checkpoints.config import ModelConfig
from checkpoints.errors import ConfigError
from checkpoints.rope import Rotary, apply_rotary

BACKENDS = ("auto", "reference", "torch", "triton")

_REGISTRY: dict[str, type[AttentionLayer]] = {}


def register(cls: type[AttentionLayer]) -> type[AttentionLayer]:
    """Class decorator: make a variant buildable by its `variant` name."""
    _REGISTRY[cls.variant] = cls
    return cls


def available_variants() -> list[str]:
    return sorted(_REGISTRY)


def build_attention(config: ModelConfig, layer: int) -> AttentionLayer:
    name, params = config.attention.for_layer(layer)
    cls = _REGISTRY.get(name)
    if cls is None:
        raise ConfigError(
            f"unknown attention variant {name!r} for layer {layer}; "
            f"available variants: {', '.join(available_variants())}"
        )
    return cls(config, layer, params)


def resolve_backend(backend: str, device: torch.device) -> str:
    """`auto` takes Triton on CUDA and the chunked PyTorch path elsewhere."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown attention backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        return "triton" if device.type == "cuda" else "torch"
    return backend


@dataclass
class RowStats:
    """Per-(batch, head, query row) statistics of one layer's attention weights,
    accumulated block by block so long inputs never need an N x N matrix.
    Every tensor is float32 of shape (B, Hq, T); `visible` is the number of keys
    the row can see (causal, after any window)."""

    layer: int
    abs_sum: torch.Tensor  # sum_j |w_ij|
    zeros: torch.Tensor  # count of exact zeros among visible keys
    first: torch.Tensor  # w_i0, the (signed) weight on key 0
    entropy: torch.Tensor  # H_i of b_ij = |w_ij| / sum_j |w_ij| (0 for silent rows)
    visible: torch.Tensor  # n_i


@dataclass
class AttentionContext:
    """What every layer needs to know about the current forward pass.

    `start` is the number of tokens already in the cache: query t of this
    chunk sits at absolute position `start + t` (bottom-right aligned mask)."""

    rotary: Rotary
    start: int
    backend: str
    block_size: int = 1024
    collect_stats: bool = False
    return_weights: bool = False
    # Filled by layers when asked: per-layer statistics or dense weights (B, Hq, T, S).
    stats: list[RowStats] = field(default_factory=list)
    weights: list[torch.Tensor] = field(default_factory=list)
    # Ragged decode (one new token per row, rows of different lengths): row b's
    # query sits at position `row_positions[b]` (B,) and sees its first
    # `row_positions[b] + 1` cached keys; `start` is unused then.
    row_positions: torch.Tensor | None = None

    def positions(self, length: int, device: torch.device) -> torch.Tensor:
        """Absolute positions of this chunk's queries: (T,), or (B, 1) in a ragged decode step."""
        if self.row_positions is not None:
            return self.row_positions.to(device)[:, None]
        return torch.arange(self.start, self.start + length, device=device)

    def row_key_lengths(self) -> list[int]:
        """Keys each row of a ragged decode step sees (host ints)."""
        assert self.row_positions is not None
        return [int(n) + 1 for n in self.row_positions.tolist()]


class AttentionLayer(nn.Module):
    """Llama attention: q/k/v/o projections, RoPE, GQA, a KV cache, and a
    `core` that variants replace."""

    variant: ClassVar[str] = ""
    # Default hyper-parameters of the variant; `params` from the config override them.
    defaults: ClassVar[dict[str, Any]] = {}

    def __init__(self, config: ModelConfig, layer: int, params: dict[str, Any]) -> None:
        super().__init__()
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            raise ConfigError(
                f"attention variant {self.variant!r} (layer {layer}) got unknown parameters {unknown}; "
                f"it accepts {sorted(self.defaults) or 'none'}"
            )
        self.config = config
        self.layer = layer
        self.params = {**self.defaults, **params}
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        self.position = config.attention.position
        self.build_projections()

    # --- pieces a variant may override ---------------------------------

    def build_projections(self) -> None:
        c, d = self.config, self.head_dim
        self.q_proj = nn.Linear(c.hidden_size, self.num_heads * d, bias=c.qkv_bias)
        self.k_proj = nn.Linear(c.hidden_size, self.num_kv_heads * d, bias=c.qkv_bias)
        self.v_proj = nn.Linear(c.hidden_size, self.num_kv_heads * d, bias=c.qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * d, c.hidden_size, bias=c.o_bias)

    def split_heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, heads, -1).transpose(1, 2)  # (B, H, T, D)

    def rotate(self, x: torch.Tensor, ctx: AttentionContext, dim: int | None = None) -> torch.Tensor:
        """Apply RoPE to (B, H, T, D) at this chunk's absolute positions."""
        if self.position != "rope":
            return x
        dim = dim if dim is not None else self.config.rotary_dim
        positions = ctx.positions(x.shape[2], x.device)
        cos, sin = ctx.rotary.cos_sin(positions.reshape(-1), dim, x.dtype)
        if positions.ndim == 2:  # one position per row: (B, dim) -> (B, 1, 1, dim) over (B, H, 1, D)
            cos, sin = cos[:, None, None], sin[:, None, None]
        return apply_rotary(x, cos.to(x.device), sin.to(x.device), ctx.rotary.interleaved)

    def core(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        ctx: AttentionContext,
        x: torch.Tensor,
    ) -> torch.Tensor:
        """(B, Hq, T, D) queries over (B, Hkv, S, D) keys/values -> (B, Hq, T, Dv)."""
        raise NotImplementedError

    def by_rows(self, ctx: AttentionContext, run, queries: dict[str, torch.Tensor],
                keys: dict[str, torch.Tensor]) -> torch.Tensor:
        """`run(**queries, **keys)` on the whole batch, or, in a ragged decode step,
        row by row over each row's own keys (so no row sees another row's padding
        and every position-dependent term uses the row's own position)."""
        if ctx.row_positions is None:
            return run(**queries, **keys)
        outs = []
        for b, n in enumerate(ctx.row_key_lengths()):
            row = {name: t[b : b + 1] for name, t in queries.items()}
            row.update({name: t[b : b + 1, :, :n] for name, t in keys.items()})
            outs.append(run(**row))
        return torch.cat(outs, dim=0)

    # --- the forward pass ----------------------------------------------

    def forward(self, x: torch.Tensor, ctx: AttentionContext, cache: LayerCache | None) -> torch.Tensor:
        """x: (B, T, hidden) -> (B, T, hidden)."""
        b, t, _ = x.shape
        q = self.rotate(self.split_heads(self.q_proj(x), self.num_heads), ctx)
        k = self.rotate(self.split_heads(self.k_proj(x), self.num_kv_heads), ctx)
        v = self.split_heads(self.v_proj(x), self.num_kv_heads)
        kv = cache.append(k=k, v=v) if cache is not None else {"k": k, "v": v}
        out = self.by_rows(ctx, lambda q, x, k, v: self.core(q, k, v, ctx, x), {"q": q, "x": x}, kv)  # (B, Hq, T, Dv)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))
