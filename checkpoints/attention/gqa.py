"""Grouped-query attention layouts shared by every implementation.

Queries have Hq heads, keys and values Hkv (Hq a multiple of Hkv); query head
h reads kv head h // G with G = Hq / Hkv. The dense references repeat the kv
heads (`expand_kv`); the chunked paths instead view the G query heads of one
kv head as one matrix of rows (`group_rows`), so a tile of dot products is
(B, Hkv, G, n, m) and k and v are never copied."""

from __future__ import annotations

import torch


def expand_kv(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, Hkv, S, D) -> (B, Hq, S, D) by repeating each kv head for its query group."""
    groups = num_heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def group_rows(x: torch.Tensor, hkv: int) -> torch.Tensor:
    """(B, Hq, n, D) -> (B, Hkv, G*n, D) fp32: each kv head's query group as one matrix."""
    b, hq, n, d = x.shape
    return x.float().reshape(b, hkv, hq // hkv * n, d)


def per_head(x: torch.Tensor, hkv: int) -> torch.Tensor:
    """A per-query-head vector (Hq,) viewed to broadcast over (B, Hkv, G, n, m) tiles."""
    return x.float().view(hkv, -1, 1, 1)


def dense_dots(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """fp32 q.k for every (query, key): q (B, Hq, T, D), k (B, Hkv, S, D) -> (B, Hq, T, S)."""
    return q.float() @ expand_kv(k, q.shape[1]).float().transpose(-1, -2)
