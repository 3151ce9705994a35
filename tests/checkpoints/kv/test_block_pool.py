"""The paged KV pool: blocks come back when the last reference goes (no leak over many
rows), ragged rows waste at most one partial block each, a fork shares full blocks and
copies only a partial last one, a row's blocks are consecutive where the pool allows (read
as a view of the pool), and a row read through its table (a view, row by row, or gathered)
holds what a contiguous `KVCache` holds."""

from __future__ import annotations

import random

import torch

from checkpoints.kv.block_pool import BlockPool, BlockTable, blocks_for
from checkpoints.kv.cache import KVCache
from checkpoints.kv.paged_batch import PagedBatch
from checkpoints.kv.paged_seq import PagedSeq

H, D = 2, 4


def _entries(n: int, seed: int, layers: int = 2) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [{"k": torch.randn(1, H, n, D, generator=g), "v": torch.randn(1, H, n, D + 1, generator=g)}
            for _ in range(layers)]


def _seq(pool: BlockPool, n: int, seed: int) -> PagedSeq:
    return PagedSeq.from_entries(pool, _entries(n, seed, pool.num_layers))


def test_many_rows_of_random_lengths_leave_no_block_behind() -> None:
    pool = BlockPool(2, block_size=4)
    rng = random.Random(0)
    live: list[PagedSeq] = []
    for i in range(200):
        live.append(_seq(pool, rng.randint(1, 23), seed=i))
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
    seqs = [_seq(pool, n, seed=n) for n in lengths]
    assert pool.used_blocks == sum(blocks_for(n, 8) for n in lengths)
    wasted = pool.used_blocks * 8 - sum(lengths)
    assert wasted <= len(lengths) * 7
    assert pool.used_bytes() == pool.used_blocks * 8 * pool.bytes_per_token()
    for seq, n in zip(seqs, lengths, strict=True):
        assert len(seq.table.blocks) * 8 - n < 8


def test_a_fork_shares_full_blocks_and_copies_the_partial_last_one() -> None:
    pool = BlockPool(2, block_size=4)
    a = _seq(pool, 10, seed=1)  # blocks: 4 + 4 + 2 tokens
    used = pool.used_blocks
    b = a.fork()
    assert b.table.blocks[:2] == a.table.blocks[:2] and b.table.blocks[2] != a.table.blocks[2]
    assert pool.used_blocks == used + 1  # one copy: the partial block
    assert [pool.refs[x] for x in a.table.blocks] == [2, 2, 1]
    c = PagedSeq(pool, pool.fork(a.table, 8))  # a whole number of blocks: nothing copied
    assert c.table.blocks == a.table.blocks[:2] and pool.used_blocks == used + 1
    # b writes its own tokens into its copy; a's keys stay as they were
    a_keys = a.entries()
    for layer, kv in zip(b.layers, _entries(1, 7), strict=True):
        layer.append(**kv)
    assert all(torch.equal(a.entries()[i][k], a_keys[i][k]) for i in range(2) for k in ("k", "v"))
    a.release()  # shared blocks stay: b and c hold them
    assert [pool.refs[x] for x in c.table.blocks] == [2, 2]
    b.release()
    c.release()
    assert pool.used_blocks == 0


def test_a_paged_row_reads_what_a_contiguous_cache_holds() -> None:
    pool = BlockPool(2, block_size=4)
    seq, cache = PagedSeq(pool), KVCache(2)
    for i, n in enumerate((5, 3, 1, 9)):  # chunks that straddle blocks
        kv = _entries(n, seed=i)
        for paged, plain, entries in zip(seq.layers, cache.layers, kv, strict=True):
            got, want = paged.append(**entries), plain.append(**entries)
            assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got)
    assert seq.length == cache.length == 18 and len(seq.table.blocks) == 5


def _batch_step(t: int, rows: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """Per layer, t new tokens for each of `rows` rows: (B, H, t, D) entries."""
    return [{k: v[0].view(H, rows, t, -1).transpose(0, 1) for k, v in layer.items()}
            for layer in _entries(t * rows, seed=seed)]


def test_a_paged_batch_steps_as_each_row_alone_steps() -> None:
    """Rows join by reference, each step writes at each row's own length (across a block
    boundary); what a row reads (gathered, or row by row: `PagedRows`) equals what its own
    contiguous cache holds; leaving rows free their blocks."""
    pool = BlockPool(2, block_size=4)
    lengths = [3, 8, 1, 6]
    seqs = [_seq(pool, n, seed=n) for n in lengths]
    used = pool.used_blocks
    batch, alone = PagedBatch(pool), []
    for seq, n in zip(seqs, lengths, strict=True):
        plain = KVCache(2)
        for layer, kv in zip(plain.layers, _entries(n, seed=n), strict=True):
            layer.append(**kv)
        alone.append(plain)
        batch.join(seq, reserve=n + 8)
    assert pool.used_blocks == used  # nothing copied on join
    for step in range(5):
        t = 1 if step % 2 == 0 else 2
        for i, x in enumerate(_batch_step(t, len(lengths), seed=100 + step)):
            read = batch.layers[i].rows if step % 4 == 1 else batch.layers[i].append
            got = read(**x)
            for b, n in enumerate(batch.host_lengths):
                want = alone[b].layers[i].append(**{k: v[b : b + 1] for k, v in x.items()})
                for name in got:
                    row = got[name].row(b, n + t) if step % 4 == 1 else got[name][b : b + 1, :, : n + t]
                    assert torch.equal(row, want[name])
        batch.advance([t] * len(lengths))
    assert batch.host_lengths == [n + 7 for n in lengths]
    assert all(len(tb.blocks) == blocks_for(n + 7, 4) for tb, n in zip(batch.tables, lengths, strict=True))
    batch.keep([2, 0])
    assert pool.used_blocks == blocks_for(1 + 7, 4) + blocks_for(3 + 7, 4)
    batch.release()
    assert pool.used_blocks == 0


def test_the_pool_hands_out_consecutive_blocks_and_a_row_grows_in_place() -> None:
    """A row's blocks are one run where the pool allows (the blocks after its last, else the
    lowest free run, else a grown pool's tail within max_bytes); scattered only when it may not grow."""
    pool = BlockPool(1, block_size=2)
    a, b = _seq(pool, 4, seed=0), _seq(pool, 6, seed=1)  # a: blocks 0-1, b: 2-4
    assert a.table.blocks == [0, 1] and b.table.blocks == [2, 3, 4]
    pool.grow_to(b.table, 10)  # the blocks after b's last are free: b's run grows in place
    assert b.table.blocks == [2, 3, 4, 5, 6]
    a.release()
    c = _seq(pool, 3, seed=2)  # the lowest free run of two: a's old blocks
    assert c.table.blocks == [0, 1]
    pool.max_bytes = 64 * pool.bytes_per_block()
    pool.grow_to(c.table, 6)  # block 2 is b's: c's third block comes from elsewhere (c is two runs now)
    assert c.table.blocks[2] != 2
    d = _seq(pool, 8, seed=3)  # four in a row: past the held blocks
    assert pool.capacity <= 64 and d.table.blocks == list(range(d.table.blocks[0], d.table.blocks[0] + 4))
    pool.max_bytes = pool.capacity * pool.bytes_per_block()  # no growth left: scattered blocks
    for seq in (b, c, d):
        seq.release()
    held = [_seq(pool, 2, seed=4 + i) for i in range(pool.capacity)]  # every block, one each
    for seq in held[::2]:
        seq.release()  # every other block free: no run of two anywhere
    e = _seq(pool, 4, seed=9)
    assert len(e.table.blocks) == 2 and e.table.blocks[1] - e.table.blocks[0] > 1
    assert torch.equal(e.entries()[0]["k"], _entries(4, 9, 1)[0]["k"])


def test_a_row_of_consecutive_blocks_is_read_as_a_view_and_a_fragmented_one_is_gathered() -> None:
    pool = BlockPool(2, block_size=4)
    a = PagedSeq(pool)
    for i, n in enumerate((5, 3, 9)):
        for layer, kv in zip(a.layers, _entries(n, seed=i), strict=True):
            got = layer.append(**kv)
    storage = pool.layers[1]["k"].untyped_storage().data_ptr()
    assert got["k"].untyped_storage().data_ptr() == storage  # a view of the pool: nothing copied
    fork = a.fork()  # shared full blocks, then its own copy of the partial one: not a run
    fork_blocks = fork.table.blocks
    assert fork_blocks[:4] == a.table.blocks[:4] and fork_blocks[4] != a.table.blocks[4]
    got = fork.layers[0].append(**_entries(1, seed=5)[0])
    assert got["k"].untyped_storage().data_ptr() != pool.layers[0]["k"].untyped_storage().data_ptr()
    assert torch.equal(got["k"][:, :, :17], a.entries()[0]["k"])
    a.release()
    fork.release()
    assert pool.used_blocks == 0


def test_the_pool_grows_by_doubling_and_keeps_what_it_held() -> None:
    pool = BlockPool(1, block_size=2)
    _seq(pool, 1, seed=0).release()
    pool.max_bytes = 6 * pool.bytes_per_block()
    a = _seq(pool, 3, seed=1)
    before = a.entries()[0]
    b = _seq(pool, 20, seed=2)  # needs 10 blocks: past max_bytes, since one allocation needs them
    assert pool.capacity >= 12
    after = a.entries()[0]
    assert all(torch.equal(before[k], after[k]) for k in before)
    a.release()
    b.release()
    assert BlockTable().blocks == [] and pool.used_blocks == 0


def test_a_preallocating_pool_takes_its_budget_once_a_block_has_a_size() -> None:
    """CUDA's way (vLLM preallocates): no doubling copy of a pool near its budget."""
    pool = BlockPool(1, block_size=2, preallocate=True)
    first = _seq(pool, 1, seed=0)  # the first block: its size becomes known at the first write
    pool.max_bytes = 40 * pool.bytes_per_block()
    more = _seq(pool, 20, seed=1)  # 10 more blocks than the 4 made at first: straight to 40
    assert pool.capacity == 40 and pool.used_blocks == 11
    assert all(torch.equal(a, b) for a, b in zip(more.entries()[0].values(), _entries(20, 1, 1)[0].values(),
                                                  strict=True))
    first.release()
    more.release()
    assert pool.used_blocks == 0


def test_own_run_copies_a_shared_row_into_one_run_of_its_own() -> None:
    pool = BlockPool(2, block_size=4)
    a = _seq(pool, 10, seed=1)
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


def test_reserve_grows_a_row_or_copies_it_into_one_run_of_its_own() -> None:
    """`BlockPool.reserve`, the one call that takes a row's reserve: a row grows (a prefix
    hit keeps its shared blocks), or with `one_run` a row holding blocks is copied into one
    fresh run and lets the shared ones go; what it holds is unchanged either way."""
    pool = BlockPool(2, block_size=4)
    a = _seq(pool, 10, seed=1)  # blocks: 4 + 4 + 2 tokens
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
