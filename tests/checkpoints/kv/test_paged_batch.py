"""The decoding batch on the paged pool: rows join by reference, a step writes at each row's
own length, what a row reads (gathered, or row by row) equals its own contiguous cache, and
leaving rows give their blocks back."""

from __future__ import annotations

import torch

from checkpoints.kv.block_pool import BlockPool, blocks_for
from checkpoints.kv.cache import KVCache
from checkpoints.kv.paged_batch import PagedBatch
from tests.checkpoints.kv.kv_cases import H, random_entries, seq_of


def _batch_step(t: int, rows: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """Per layer, t new tokens for each of `rows` rows: (B, H, t, D) entries."""
    return [{k: v[0].view(H, rows, t, -1).transpose(0, 1) for k, v in layer.items()}
            for layer in random_entries(t * rows, seed=seed)]


def test_a_paged_batch_steps_as_each_row_alone_steps() -> None:
    """Rows join by reference, each step writes at each row's own length (across a block
    boundary); what a row reads (gathered, or row by row: `PagedRows`) equals what its own
    contiguous cache holds; leaving rows free their blocks."""
    pool = BlockPool(2, block_size=4)
    lengths = [3, 8, 1, 6]
    seqs = [seq_of(pool, n, seed=n) for n in lengths]
    used = pool.used_blocks
    batch, alone = PagedBatch(pool), []
    for seq, n in zip(seqs, lengths, strict=True):
        plain = KVCache(2)
        for layer, kv in zip(plain.layers, random_entries(n, seed=n), strict=True):
            layer.append(**kv)
        alone.append(plain)
        batch.join(seq, reach=n + 8)
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
