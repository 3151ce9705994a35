"""The decoding batch on the paged pool (continuous batching): rows of their own lengths,
each a `BlockTable` of the pool (`block_pool.py`). A row joins by handing over its
`PagedSeq`'s table (nothing copied) and leaves by releasing it (its blocks go back); a step
writes each row's tokens at its own length and reads the rows gathered (`views.gather`),
row by row (`views.PagedRows`) or through the block table (`write`, for `decode_paged`)."""

from __future__ import annotations

import torch

from checkpoints.kv import views
from checkpoints.kv.block_pool import BlockPool, BlockTable, blocks_for
from checkpoints.kv.paged_seq import PagedSeq


class PagedBatchLayer:
    """One layer of a `PagedBatch`: `append` writes t tokens per row at each row's own
    length and returns every row's entries gathered (B, H, width, D): row b's keys are its
    first `lengths[b] + t`, the rest is never read. `rows` returns them row by row
    (`PagedRows`: views, nothing gathered); `write` the pool's tensors (a kernel that reads
    through the block table)."""

    def __init__(self, batch: PagedBatch, index: int) -> None:
        self.batch, self.index = batch, index

    def _store(self, entries: dict[str, torch.Tensor]) -> int:
        """Write t tokens per row at each row's own length (slots from the batch); t."""
        pool = self.batch.pool
        t = next(iter(entries.values())).shape[2]
        write = self.batch.write_slots(self.index, t).reshape(-1)
        for name, x in entries.items():
            flat = pool.tensors.flat(self.index, name)
            flat[write] = x.transpose(1, 2).reshape(-1, x.shape[1], x.shape[3]).to(flat.dtype)  # (B*t, H, D)
        return t

    def append(self, **entries: torch.Tensor) -> dict[str, torch.Tensor]:
        blocks, width = self.batch.read_blocks(self._store(entries))
        return {name: views.gather(self.batch.pool.layers[self.index][name], blocks, width) for name in entries}

    def rows(self, **entries: torch.Tensor) -> dict[str, torch.Tensor | views.PagedRows]:
        """`append` read row by row (`PagedRows`), for attention that runs a row at a time
        (the PyTorch backends); gathered as `append` when the batch is `full_width` (a
        captured step's shapes cannot follow each row's length)."""
        if self.batch.full_width:
            return self.append(**entries)
        t = self._store(entries)
        reads = self.batch.row_reads(t)
        return {name: views.PagedRows(self.batch.pool.layers[self.index][name], reads) for name in entries}

    def write(self, **entries: torch.Tensor) -> dict[str, torch.Tensor]:
        """`append` without the gather: the pool's tensors (blocks, block_size, H, D), for a
        kernel that reads them through the batch's `table` (`decode_paged`)."""
        self._store(entries)
        return {name: self.batch.pool.layers[self.index][name] for name in entries}


class PagedBatch:
    """The decoding batch on the pool (continuous batching): rows of their own lengths,
    each a block table. A row joins by handing over its `PagedSeq`'s table (no copy) and
    leaves by releasing it; before a step `prepare(t)` gives every row blocks for its next
    t tokens (allocation as a row grows). `lengths` (B,) long on the device beside
    `host_lengths`; `table` (B, ceil(capacity / block_size)) long, the rows' blocks (0
    past a row's last: never read).

    `full_width`: a step's attention gets `capacity` keys per row and the slots are
    computed on the device from `table` and `lengths` (both updated in place), so a
    CUDA graph captured once replays until a row joins or leaves (`layout`)."""

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self.layers = [PagedBatchLayer(self, i) for i in range(pool.num_layers)]
        self.tables: list[BlockTable] = []
        self._host_lengths: list[int] = []
        self._capacity = 0
        self.lengths = torch.zeros(0, dtype=torch.long, device=pool.device)
        self.table = torch.zeros(0, 0, dtype=torch.long, device=pool.device)
        self._stale = False  # rows joined or left since `table` was built
        self._write: torch.Tensor | None = None  # this step's slots (`write_slots`)
        self._reads: tuple[int, list[tuple[int | None, torch.Tensor | None]]] | None = None  # `row_reads`
        self.full_width = False

    @property
    def batch_size(self) -> int:
        return len(self.tables)

    @property
    def max_length(self) -> int:
        return max(self._host_lengths, default=0)

    @property
    def host_lengths(self) -> list[int]:
        """`lengths` on the host (kept beside it: reading the device tensor would synchronise)."""
        return list(self._host_lengths)

    @property
    def capacity(self) -> int:
        """Tokens a row may reach (the most any joined row may reach): the table's width in tokens."""
        return self._capacity

    def join(self, seq: PagedSeq, reach: int) -> None:
        """Add `seq`'s row at the end of the batch; its table moves here (the seq is left
        empty). `reach`: the length this row may grow to (what the batch's capacity covers;
        the blocks themselves were reserved by `PagedSeq.reserve`)."""
        table, seq.table = seq.table, BlockTable()
        table.length = seq.length
        self.tables.append(table)
        self._host_lengths.append(table.length)
        self._capacity = max(self._capacity, reach, table.length)
        self._stale = True
        self._reads = None
        self._lengths_from_host()

    def keep(self, rows: list[int]) -> None:
        """Keep only `rows` (indices into the batch), in that order: the others' blocks go back."""
        kept = set(rows)
        for i, table in enumerate(self.tables):
            if i not in kept:
                self.pool.free_table(table)
        self.tables = [self.tables[i] for i in rows]
        self._host_lengths = [self._host_lengths[i] for i in rows]
        self._stale = True
        self._reads = None
        self._lengths_from_host()

    def _lengths_from_host(self) -> None:
        """`lengths` anew after a join or a leave (the step's RoPE reads it before any append)."""
        self.lengths = torch.tensor(self._host_lengths, dtype=torch.long).to(self.pool.device)

    def release(self) -> None:
        """Every row's blocks back to the pool (a run that stopped part way)."""
        self.keep([])

    def prepare(self, t: int = 1) -> None:
        """Before a step writing t tokens per row: blocks for every row's next t tokens
        (written into `table` in place), and the table rebuilt if rows joined or left."""
        if self._stale:
            self._rebuild()
        width = self.table.shape[1]
        for b, (table, n) in enumerate(zip(self.tables, self._host_lengths, strict=True)):
            start = len(table.blocks)
            new = self.pool.grow_to(table, n + t)
            if new:
                if len(table.blocks) > width:
                    self._capacity = max(self._capacity, n + t)
                    self._rebuild()
                    width = self.table.shape[1]
                else:
                    self.table[b, start : start + len(new)] = torch.tensor(new, dtype=torch.long).to(
                        self.table.device, non_blocking=True)
        self._write = None
        self._reads = None

    def _rebuild(self) -> None:
        bs = self.pool.block_size
        width = max(blocks_for(self._capacity, bs), max((len(t.blocks) for t in self.tables), default=0), 1)
        rows = torch.zeros(len(self.tables), width, dtype=torch.long)
        for b, table in enumerate(self.tables):
            rows[b, : len(table.blocks)] = torch.tensor(table.blocks, dtype=torch.long)
        self.table = rows.to(self.pool.device)
        self._stale = False
        self._write = None
        self._reads = None

    def row_reads(self, t: int) -> list[tuple[int | None, torch.Tensor | None]]:
        """Per row, how a step of t tokens reads it: (first slot, None) when its blocks up to
        its length + t are consecutive (a view), else (None, those blocks (1, nb)) (gathered).
        Made by the first read of a step, shared by every layer and entry."""
        if self._reads is None or self._reads[0] != t:
            bs, reads = self.pool.block_size, []
            for table, n in zip(self.tables, self._host_lengths, strict=True):
                nb = blocks_for(n + t, bs)
                start = views.run_start(table.blocks, nb, bs)
                blocks = None if start is not None else torch.tensor([table.blocks[:nb]], dtype=torch.long).to(
                    self.pool.device, non_blocking=True)
                reads.append((start, blocks))
            self._reads = (t, reads)
        return self._reads[1]

    def write_slots(self, layer: int, t: int) -> torch.Tensor:
        """Slots this step writes (B, t), computed on the device (from `table` and `lengths`)
        by the first layer of the forward and shared by the rest."""
        if layer == 0 or self._write is None or self._write.shape[1] != t:
            self.prepare(t)  # nothing to do when the caller prepared (a CUDA graph's step)
            bs = self.pool.block_size
            at = self.lengths[:, None] + torch.arange(t, device=self.table.device)  # (B, t)
            self._write = self.table.gather(1, at // bs) * bs + at % bs
        return self._write

    def read_blocks(self, t: int) -> tuple[torch.Tensor, int]:
        """The gather path's blocks (B, nb) (a view of `table`) and the keys a row reads this
        step: the longest row's after the step's t tokens, or `capacity` when `full_width`."""
        width = self.capacity if self.full_width else self.max_length + t
        return self.table[:, : blocks_for(width, self.pool.block_size)], width

    def advance(self, counts: list[int] | None = None) -> None:
        """After a decode step: every row holds one more token (`lengths` in place: a captured
        step reads it where it is); after a verifying step, row b holds `counts[b]` more."""
        if counts is None:
            self._host_lengths = [n + 1 for n in self._host_lengths]
            self.lengths.add_(1)
        else:
            self._host_lengths = [n + c for n, c in zip(self._host_lengths, counts, strict=True)]
            self.lengths.add_(torch.tensor(counts, dtype=torch.long).to(self.lengths.device, non_blocking=True))
        for table, n in zip(self.tables, self._host_lengths, strict=True):
            table.length = n
        self._write = None
        self._reads = None

    def layout(self) -> tuple:
        """Where the step's tensors live: rows, capacity, the lengths', the table's and the
        pool's addresses. Equal layouts can replay the same captured step."""
        if self._stale:
            self._rebuild()
        return (self.batch_size, self.capacity, self.lengths.data_ptr(), self.table.data_ptr(),
                *(buf.data_ptr() for layer in self.pool.layers for buf in layer.values()))

    def bytes_per_token(self) -> int:
        return self.pool.bytes_per_token()
