"""Shared helpers for the paged pool's tests (block_pool, paged_seq, paged_batch): random
entries of a few layers (k and v of different widths) and a row of the pool holding them."""

from __future__ import annotations

import torch

from checkpoints.kv.block_pool import BlockPool
from checkpoints.kv.paged_seq import PagedSeq

H, D = 2, 4


def random_entries(n: int, seed: int, layers: int = 2) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [{"k": torch.randn(1, H, n, D, generator=g), "v": torch.randn(1, H, n, D + 1, generator=g)}
            for _ in range(layers)]


def seq_of(pool: BlockPool, n: int, seed: int) -> PagedSeq:
    return PagedSeq.from_entries(pool, random_entries(n, seed, pool.num_layers))
