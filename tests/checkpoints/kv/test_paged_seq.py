"""One row of the paged pool as a KV cache: read through its table it holds what a contiguous
`KVCache` holds, as a view of the pool when its blocks are one run and gathered when they
are not, and `own_run` copies a shared row into one run of its own."""

from __future__ import annotations

import torch

from checkpoints.kv.block_pool import BlockPool
from checkpoints.kv.cache import KVCache
from checkpoints.kv.paged_seq import PagedSeq
from tests.checkpoints.kv.kv_cases import random_entries, seq_of


def test_a_paged_row_reads_what_a_contiguous_cache_holds() -> None:
    pool = BlockPool(2, block_size=4)
    seq, cache = PagedSeq(pool), KVCache(2)
    for i, n in enumerate((5, 3, 1, 9)):  # chunks that straddle blocks
        kv = random_entries(n, seed=i)
        for paged, plain, entries in zip(seq.layers, cache.layers, kv, strict=True):
            got, want = paged.append(**entries), plain.append(**entries)
            assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got)
    assert seq.length == cache.length == 18 and len(seq.table.blocks) == 5


def test_a_row_of_consecutive_blocks_is_read_as_a_view_and_a_fragmented_one_is_gathered() -> None:
    pool = BlockPool(2, block_size=4)
    a = PagedSeq(pool)
    for i, n in enumerate((5, 3, 9)):
        for layer, kv in zip(a.layers, random_entries(n, seed=i), strict=True):
            got = layer.append(**kv)
    storage = pool.layers[1]["k"].untyped_storage().data_ptr()
    assert got["k"].untyped_storage().data_ptr() == storage  # a view of the pool: nothing copied
    fork = a.fork()  # shared full blocks, then its own copy of the partial one: not a run
    fork_blocks = fork.table.blocks
    assert fork_blocks[:4] == a.table.blocks[:4] and fork_blocks[4] != a.table.blocks[4]
    got = fork.layers[0].append(**random_entries(1, seed=5)[0])
    assert got["k"].untyped_storage().data_ptr() != pool.layers[0]["k"].untyped_storage().data_ptr()
    assert torch.equal(got["k"][:, :, :17], a.entries()[0]["k"])
    a.release()
    fork.release()
    assert pool.used_blocks == 0


def test_own_run_copies_a_shared_row_into_one_run_of_its_own() -> None:
    pool = BlockPool(2, block_size=4)
    a = seq_of(pool, 10, seed=1)
    b = a.fork()  # two shared blocks, then its own copy of the partial one
    want = b.entries()
    b.own_run(20)
    first = b.table.blocks[0]
    assert b.table.blocks == list(range(first, first + 5)) and b.length == 10
    assert [pool.refs[x] for x in a.table.blocks] == [1, 1, 1]  # a's blocks are a's alone again
    got = b.entries()
    assert all(torch.equal(got[i][k], want[i][k]) for i in range(2) for k in ("k", "v"))
    a.release()
    b.release()
    assert pool.used_blocks == 0
