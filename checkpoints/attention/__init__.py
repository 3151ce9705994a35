"""Attention variants: one module per family, a registry by name.

Each variant is an `AttentionLayer` subclass registered with `@register`.
The model builds one layer per block with `build_attention(config, layer)`;
the variant owns its projections, its extra parameters (and so their
checkpoint names) and its KV-cache entries. Backends: `reference` (dense),
`torch` (chunked, streaming) and `triton` (fused kernels); `auto` picks
Triton on CUDA and the chunked path on CPU."""

# Importing the variant modules registers them (one module per family).
from checkpoints.attention import (  # noqa: F401
    cog,
    diff,
    entmax,
    gated,
    intg,
    rela,
    softmax,
    softpick,
    ssmax,
    threshold,
)
from checkpoints.attention.base import (
    BACKENDS,
    AttentionLayer,
    available_variants,
    build_attention,
    register,
    resolve_backend,
)
from checkpoints.attention.cache import KVCache, LayerCache

__all__ = [
    "BACKENDS",
    "AttentionLayer",
    "KVCache",
    "LayerCache",
    "available_variants",
    "build_attention",
    "register",
    "resolve_backend",
]
