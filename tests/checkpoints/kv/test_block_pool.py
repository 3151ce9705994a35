"""The paged pool's bookkeeping: blocks come back when the last reference goes (no leak over
many rows), ragged rows waste at most one partial block each, a fork shares full blocks and
copies only a partial last one, a row's blocks are consecutive where the pool allows, the
pool grows by doubling (or at once, preallocating) keeping what it held, and `reserve`
takes a row's blocks (grown, or copied into one run of its own)."""

from __future__ import annotations

import random

import torch

from checkpoints.kv.block_pool import BlockPool, BlockTable, blocks_for
from checkpoints.kv.paged_seq import PagedSeq
from tests.checkpoints.kv.kv_cases import random_entries, seq_of


def test_many_rows_of_random_lengths_leave_no_block_behind() -> None:
    pool = BlockPool(2, block_size=4)
    rng = random.Random(0)
    live: list[PagedSeq] = []
    for i in range(200):
        live.append(seq_of(pool, rng.randint(1, 23), seed=i))
        if rng.random() < 0.3:
            live.append(live[rng.randrange(len(live))].fork())
        while len(live) > 6:
            live.pop(rng.randrange(len(live))).release()
    for seq in live:
        seq.release()
    assert pool.used_blocks == 0 and sorted(pool.free) == list(range(pool.capacity))
    assert all(r == 0 for r in pool.refs)
    assert pool.capacity <= 64  # 7 rows of at most 6 blocks: freed blocks were reused, not grown past


def test_ragged_rows_waste_at_most_one_partial_block_each() -> None:
    pool = BlockPool(1, block_size=8)
    lengths = [1, 7, 8, 9, 30, 64, 65]
    seqs = [seq_of(pool, n, seed=n) for n in lengths]
    assert pool.used_blocks == sum(blocks_for(n, 8) for n in lengths)
    wasted = pool.used_blocks * 8 - sum(lengths)
    assert wasted <= len(lengths) * 7
    assert pool.used_bytes() == pool.used_blocks * 8 * pool.bytes_per_token()
    for seq, n in zip(seqs, lengths, strict=True):
        assert len(seq.table.blocks) * 8 - n < 8


def test_a_fork_shares_full_blocks_and_copies_the_partial_last_one() -> None:
    pool = BlockPool(2, block_size=4)
    a = seq_of(pool, 10, seed=1)  # blocks: 4 + 4 + 2 tokens
    used = pool.used_blocks
    b = a.fork()
    assert b.table.blocks[:2] == a.table.blocks[:2] and b.table.blocks[2] != a.table.blocks[2]
    assert pool.used_blocks == used + 1  # one copy: the partial block
    assert [pool.refs[x] for x in a.table.blocks] == [2, 2, 1]
    c = PagedSeq(pool, pool.fork(a.table, 8))  # a whole number of blocks: nothing copied
    assert c.table.blocks == a.table.blocks[:2] and pool.used_blocks == used + 1
    # b writes its own tokens into its copy; a's keys stay as they were
    a_keys = a.entries()
    for layer, kv in zip(b.layers, random_entries(1, 7), strict=True):
        layer.append(**kv)
    assert all(torch.equal(a.entries()[i][k], a_keys[i][k]) for i in range(2) for k in ("k", "v"))
    a.release()  # shared blocks stay: b and c hold them
    assert [pool.refs[x] for x in c.table.blocks] == [2, 2]
    b.release()
    c.release()
    assert pool.used_blocks == 0


def test_the_pool_hands_out_consecutive_blocks_and_a_row_grows_in_place() -> None:
    """A row's blocks are one run where the pool allows (the blocks after its last, else the
    lowest free run, else a grown pool's tail within max_bytes); scattered only when it may not grow."""
    pool = BlockPool(1, block_size=2)
    a, b = seq_of(pool, 4, seed=0), seq_of(pool, 6, seed=1)  # a: blocks 0-1, b: 2-4
    assert a.table.blocks == [0, 1] and b.table.blocks == [2, 3, 4]
    pool.grow_to(b.table, 10)  # the blocks after b's last are free: b's run grows in place
    assert b.table.blocks == [2, 3, 4, 5, 6]
    a.release()
    c = seq_of(pool, 3, seed=2)  # the lowest free run of two: a's old blocks
    assert c.table.blocks == [0, 1]
    pool.max_bytes = 64 * pool.bytes_per_block()
    pool.grow_to(c.table, 6)  # block 2 is b's: c's third block comes from elsewhere (c is two runs now)
    assert c.table.blocks[2] != 2
    d = seq_of(pool, 8, seed=3)  # four in a row: past the held blocks
    assert pool.capacity <= 64 and d.table.blocks == list(range(d.table.blocks[0], d.table.blocks[0] + 4))
    pool.max_bytes = pool.capacity * pool.bytes_per_block()  # no growth left: scattered blocks
    for seq in (b, c, d):
        seq.release()
    held = [seq_of(pool, 2, seed=4 + i) for i in range(pool.capacity)]  # every block, one each
    for seq in held[::2]:
        seq.release()  # every other block free: no run of two anywhere
    e = seq_of(pool, 4, seed=9)
    assert len(e.table.blocks) == 2 and e.table.blocks[1] - e.table.blocks[0] > 1
    assert torch.equal(e.entries()[0]["k"], random_entries(4, 9, 1)[0]["k"])


def test_the_pool_grows_by_doubling_and_keeps_what_it_held() -> None:
    pool = BlockPool(1, block_size=2)
    seq_of(pool, 1, seed=0).release()
    pool.max_bytes = 6 * pool.bytes_per_block()
    a = seq_of(pool, 3, seed=1)
    before = a.entries()[0]
    b = seq_of(pool, 20, seed=2)  # needs 10 blocks: past max_bytes, since one allocation needs them
    assert pool.capacity >= 12
    after = a.entries()[0]
    assert all(torch.equal(before[k], after[k]) for k in before)
    a.release()
    b.release()
    assert BlockTable().blocks == [] and pool.used_blocks == 0


def test_a_preallocating_pool_takes_its_budget_once_a_block_has_a_size() -> None:
    """CUDA's way (vLLM preallocates): no doubling copy of a pool near its budget."""
    pool = BlockPool(1, block_size=2, preallocate=True)
    first = seq_of(pool, 1, seed=0)  # the first block: its size becomes known at the first write
    pool.max_bytes = 40 * pool.bytes_per_block()
    more = seq_of(pool, 20, seed=1)  # 10 more blocks than the 4 made at first: straight to 40
    assert pool.capacity == 40 and pool.used_blocks == 11
    assert all(torch.equal(a, b) for a, b in zip(more.entries()[0].values(), random_entries(20, 1, 1)[0].values(),
                                                  strict=True))
    first.release()
    more.release()
    assert pool.used_blocks == 0


def test_reserve_grows_a_row_or_copies_it_into_one_run_of_its_own() -> None:
    """`BlockPool.reserve`, the one call that takes a row's reserve: a row grows (a prefix
    hit keeps its shared blocks), or with `one_run` a row holding blocks is copied into one
    fresh run and lets the shared ones go; what it holds is unchanged either way."""
    pool = BlockPool(2, block_size=4)
    a = seq_of(pool, 10, seed=1)  # blocks: 4 + 4 + 2 tokens
    grown = a.fork()  # two shared blocks, then its own copy of the partial one
    shared, want = grown.table.blocks[:2], grown.entries()
    grown.reserve(20)
    assert grown.table.blocks[:2] == shared and len(grown.table.blocks) == 5
    assert [pool.refs[x] for x in shared] == [2, 2]
    run = a.fork()
    run.reserve(20, one_run=True)
    first = run.table.blocks[0]
    assert run.table.blocks == list(range(first, first + 5)) and not set(run.table.blocks) & set(a.table.blocks)
    assert [pool.refs[x] for x in shared] == [2, 2]  # a's and grown's: run let its references go
    for row in (grown, run):
        got = row.entries()
        assert all(torch.equal(got[i][k], want[i][k]) for i in range(2) for k in ("k", "v"))
    for row in (a, grown, run):
        row.release()
    assert pool.used_blocks == 0
