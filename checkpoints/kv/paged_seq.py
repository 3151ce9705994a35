"""One row of the paged pool as a KV cache (`length`, `layers[i].append`, as `cache.KVCache`
has): what a prompt's prefill (from a cached prefix: its blocks by reference), a
log-likelihood's continuation and a one-sequence decode run on. Its blocks are a
`BlockTable` of the pool (`block_pool.py`); a decoding row hands its table over to the
batch (`paged_batch.PagedBatch.join`)."""

from __future__ import annotations

import torch

from checkpoints.kv import views
from checkpoints.kv.block_pool import BlockPool, BlockTable, blocks_for


class PagedSeqLayer:
    """One layer of a `PagedSeq`: `append` writes t tokens into the row's blocks and returns
    the row's whole entries (1, H, length, D), as `LayerCache.append` does: a view of the
    pool when the row's blocks are consecutive, else gathered."""

    def __init__(self, seq: PagedSeq, index: int) -> None:
        self.seq, self.index = seq, index
        self.length = seq.table.length

    def append(self, **entries: torch.Tensor) -> dict[str, torch.Tensor]:
        seq, pool = self.seq, self.seq.pool
        t = next(iter(entries.values())).shape[2]
        new_len = self.length + t
        if new_len > seq.table.length:  # the first layer of this forward: room for its tokens
            pool.grow_to(seq.table, new_len)
            seq.table.length = new_len
        write, start, read = seq.slots(self.length, new_len)
        out = {}
        for name, x in entries.items():
            buf = pool.tensors.entry(self.index, name, x, pool.capacity)
            flat = pool.tensors.flat(self.index, name)
            flat[write] = x[0].transpose(0, 1).to(flat.dtype)  # (t, H, D)
            out[name] = views.row(buf, start, read, new_len)
        self.length = new_len
        return out


class PagedSeq:
    """One row in the pool as a KV cache (`length`, `layers[i].append`): a prompt's prefill
    (from a cached prefix: its blocks by reference), a continuation, a one-sequence decode."""

    def __init__(self, pool: BlockPool, table: BlockTable | None = None) -> None:
        self.pool = pool
        self.table = table if table is not None else BlockTable()
        self.layers = [PagedSeqLayer(self, i) for i in range(pool.num_layers)]
        self._slots: tuple[int, int, torch.Tensor, int | None, torch.Tensor] | None = None

    def slots(self, lo: int, hi: int) -> tuple[torch.Tensor, int | None, torch.Tensor]:
        """Slots to write (tokens [lo, hi), within the row's blocks), the first slot of tokens
        [0, hi) when their blocks are consecutive (read as a view) and those blocks (1, nb)
        (else gathered): made by the first layer of a forward, shared by the rest."""
        if self._slots is None or self._slots[:2] != (lo, hi):
            bs, device = self.pool.block_size, self.pool.device
            nb = blocks_for(hi, bs)
            blocks = self.table.blocks[:nb]
            read = torch.tensor([blocks], dtype=torch.long).to(device, non_blocking=True)
            start = views.run_start(blocks, nb, bs)
            pos = torch.arange(lo, hi)
            write = (torch.tensor(self.table.blocks, dtype=torch.long)[pos // bs] * bs + pos % bs).to(
                device, non_blocking=True)  # (hi - lo,)
            self._slots = (lo, hi, write, start, read)
        return self._slots[2:]

    @property
    def length(self) -> int:
        return self.layers[0].length if self.layers else self.table.length

    def entries(self) -> list[dict[str, torch.Tensor]]:
        """Every layer's entries (1, H, length, D), gathered (a copy: tests and inspection)."""
        _, _, read = self.slots(self.length, self.length)
        return [{name: views.gather(buf, read, self.length) for name, buf in self.pool.layers[i].items()}
                for i in range(self.pool.num_layers)]

    def reserve(self, tokens: int, one_run: bool = False) -> None:
        """Blocks for every token the row may reach (`BlockPool.reserve`; `one_run`: as one
        run of its own, its blocks copied into it)."""
        self.pool.reserve(self.table, tokens, one_run)
        self._slots = None

    def own_run(self, tokens: int) -> None:
        """The row's blocks as one run of its own with room for `tokens`: `reserve` with `one_run`."""
        self.reserve(tokens, one_run=True)

    def fork(self) -> PagedSeq:
        """Another row starting from this one's tokens: full blocks shared, the partial last one copied."""
        return PagedSeq(self.pool, self.pool.fork(self.table, self.length))

    def release(self) -> None:
        self.pool.free_table(self.table)
        self._slots = None
        for layer in self.layers:
            layer.length = 0

    def bytes_per_token(self) -> int:
        return self.pool.bytes_per_token()

    def extend(self, entries: list[dict[str, torch.Tensor]]) -> PagedSeq:
        """`entries` ((1, H, n, D) per layer and name: a padded prefill's row) copied in after
        what the row holds; the row."""
        for layer, kv in zip(self.layers, entries, strict=True):
            layer.append(**kv)
        return self

    @classmethod
    def from_entries(cls, pool: BlockPool, entries: list[dict[str, torch.Tensor]]) -> PagedSeq:
        """A row holding `entries` ((1, H, n, D) per layer and name), copied in."""
        return cls(pool).extend(entries)
