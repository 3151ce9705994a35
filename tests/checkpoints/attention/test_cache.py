"""The ragged decoding batch's cache: rows joining between two steps are copied in together
(one allocation per buffer, not one per row), and what each row holds is its own prefill."""

from __future__ import annotations

import torch

from checkpoints.attention.cache import KVCache, RaggedKVCache


def single(n: int, seed: int, layers: int = 2) -> KVCache:
    g = torch.Generator().manual_seed(seed)
    cache = KVCache(layers)
    for layer in cache.layers:
        layer.append(k=torch.randn(1, 2, n, 4, generator=g), v=torch.randn(1, 2, n, 4, generator=g))
    return cache


def test_rows_joining_together_are_copied_in_once_and_keep_their_entries() -> None:
    rows = [single(n, seed) for seed, n in enumerate((5, 9, 3))]
    batch = RaggedKVCache.empty_like(rows[0])
    for cache in rows:
        batch.join(cache, reserve=12)
    assert batch.capacity == 12 and batch.host_lengths == [5, 9, 3]
    allocations = 0
    zeros = torch.Tensor.new_zeros

    def counted(self, *args, **kwargs):
        nonlocal allocations
        allocations += 1
        return zeros(self, *args, **kwargs)

    torch.Tensor.new_zeros = counted  # type: ignore[method-assign]
    try:
        buffers = batch.layers[0].buffers
        assert allocations == 2 * 2  # every buffer (k, v) of every layer once, for the three rows together
        assert batch.layers[1].buffers["k"] is batch.layers[1].buffers["k"]  # read again: nothing copied
        assert allocations == 4
    finally:
        torch.Tensor.new_zeros = zeros  # type: ignore[method-assign]
    assert buffers["k"].shape == (3, 2, 12, 4)
    for b, cache in enumerate(rows):
        n = cache.length
        for i, layer in enumerate(cache.layers):
            for name in ("k", "v"):
                assert torch.equal(batch.layers[i].buffers[name][b, :, :n], layer.get(name)[0])


def test_a_row_joining_later_keeps_the_rows_before_it_and_a_wider_reserve_widens_all() -> None:
    first, later = single(4, 0), single(6, 1)
    batch = RaggedKVCache.empty_like(first)
    batch.join(first, reserve=8)
    batch.layers[0].append(k=torch.ones(1, 2, 1, 4), v=torch.ones(1, 2, 1, 4))  # a step writes at position 4
    batch.join(later, reserve=20)
    k = batch.layers[0].buffers["k"]
    assert k.shape == (2, 2, 20, 4)
    assert torch.equal(k[0, :, :4], first.layers[0].get("k")[0]) and torch.equal(k[0, :, 4], torch.ones(2, 4))
    assert torch.equal(k[1, :, :6], later.layers[0].get("k")[0])
    batch.keep([1])
    assert batch.host_lengths == [6] and torch.equal(batch.layers[0].buffers["k"][0], k[1])
