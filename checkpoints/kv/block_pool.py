"""One paged KV pool (vLLM's block pool and KV-cache manager): every row's keys and
values live in fixed-size blocks of one pool, found through the row's block table.

- `BlockPool`: per layer and cached name (k, v, and whatever else a variant caches) one
  tensor (blocks, block_size, H, D), laid out head-major in memory (H, blocks * block_size,
  D); a block id names the same block in every layer. Free blocks (a bytearray: a run of n
  is one `find`) and a reference count per block: a block is free again when its last
  reference goes. Blocks are handed out consecutive where the pool allows (`allocate`). On
  the CPU the tensors grow by doubling (never past `max_bytes` unless one allocation needs
  more), so an engine holds what it used, not its budget; on CUDA they take `max_bytes` at
  once when the first row's size per token is known (vLLM preallocates: doubling a pool
  near its budget would hold 1.5x the budget while copying).
- `BlockTable`: a row's blocks in position order; token p of the row is slot
  `blocks[p // block_size] * block_size + p % block_size`. A row holds
  ceil(length / block_size) blocks: rows of any length waste at most one partial block
  (the engine reserves a generating row's blocks up to its reserve at its prefill).
- Sharing is by reference: `BlockPool.fork` hands a prefix's blocks to another table
  (refcount + 1, no copy), copying only a partially filled last block, which the new row
  will write into (copy on write, as vLLM does).
- `PagedSeq`: one row as a KV cache (`length`, `layers[i].append`): what a prefill, a
  log-likelihood's continuation and a one-sequence decode run on.
- `PagedBatch`: the decoding batch (continuous batching) over the rows' tables: a row joins
  by handing over its table (nothing copied) and leaves by releasing it (its blocks go back).

Reading: a row whose blocks are consecutive is a (1, H, T, D) view of the pool (tokens
contiguous per head); the PyTorch backends read a decoding batch row by row that way
(`PagedRows`), gathering only a row that is not one run (`PagedSeq.own_run` makes one). Triton's kernels without a block
table read the rows gathered into one batch (`gather`: one `index_select` of whole blocks
per entry and layer); `decode_paged` reads the pool through the table. Shapes: entries
(B, H, T, D) as everywhere in `checkpoints.attention`; pool tensors (blocks, block_size, H, D)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

# Tokens per block: vLLM's default on CUDA. Small blocks waste little per row (at most
# block_size - 1 slots) and make a prefix hit share all but one partial block.
DEFAULT_BLOCK_SIZE = 16


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks that hold `tokens` tokens."""
    return -(-tokens // block_size)


@dataclass
class BlockTable:
    """A row's blocks in position order and the tokens it holds."""

    blocks: list[int] = field(default_factory=list)
    length: int = 0


class BlockPool:
    """Fixed-size blocks of every layer's KV entries, a free list and reference counts.
    `max_bytes` caps how far the tensors grow by doubling (None: no cap; an allocation that
    needs more still gets it: the engine admits its first row whatever the budget).
    `preallocate` (default: on CUDA) grows straight to `max_bytes` once a block's size is known."""

    def __init__(self, num_layers: int, device: torch.device | str = "cpu", block_size: int = DEFAULT_BLOCK_SIZE,
                 max_bytes: int | None = None, preallocate: bool | None = None) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.num_layers, self.device, self.block_size = num_layers, torch.device(device), block_size
        self.max_bytes = max_bytes
        self.preallocate = self.device.type == "cuda" if preallocate is None else preallocate
        self.layers: list[dict[str, torch.Tensor]] = [{} for _ in range(num_layers)]
        self.refs: list[int] = []  # per block
        self._free = bytearray()  # per block: 1 while free (a run of n free blocks is one `find`)
        self._free_count = 0
        self.peak_blocks = 0  # the most blocks held at once (bench/kv_memory.py reports it)

    # --- blocks ------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Blocks the pool's tensors hold."""
        return len(self.refs)

    @property
    def free(self) -> list[int]:
        """The free blocks' ids, ascending."""
        return [b for b, f in enumerate(self._free) if f]

    @property
    def used_blocks(self) -> int:
        return self.capacity - self._free_count

    def allocate(self, n: int, after: int | None = None) -> list[int]:
        """n blocks (each with one reference), consecutive where the pool allows: the n blocks
        right `after` a row's last block when they are free (the row's run grows in place),
        else the lowest free run of n, else (within `max_bytes`) a grown pool's free tail;
        only a pool that may not grow hands out scattered blocks. A row whose blocks are
        consecutive is read as a view of the pool (`PagedSeq.row_start`): nothing gathered."""
        if n == 0:
            return []
        run = b"\x01" * n
        start = -1
        if after is not None and self._free.find(run, after + 1, after + 1 + n) == after + 1:
            start = after + 1
        if start < 0:
            start = self._free.find(run)
        tail = len(self._free) - len(self._free.rstrip(b"\x01"))  # free blocks at the end: a run's start
        if start < 0 and (n > self._free_count or self._may_grow(self.capacity + n - tail)):
            self._grow(self.capacity + n - tail)
            start = self._free.find(run)
        if start >= 0:
            out = list(range(start, start + n))
            self._free[start : start + n] = bytes(n)
        else:  # no run of n anywhere: the lowest free blocks
            out, at = [], 0
            while len(out) < n:
                at = self._free.find(1, at)
                out.append(at)
                self._free[at] = 0
        self._free_count -= n
        for b in out:
            self.refs[b] = 1
        self.peak_blocks = max(self.peak_blocks, self.used_blocks)
        return out

    def _may_grow(self, blocks: int) -> bool:
        """Whether the tensors may grow to `blocks` for a consecutive run (within `max_bytes`;
        a pool without a cap grows only when it has too few free blocks)."""
        per_block = self.bytes_per_block()
        return self.max_bytes is not None and per_block > 0 and blocks * per_block <= self.max_bytes

    def share(self, blocks: list[int]) -> None:
        """One more reference to each of `blocks`."""
        for b in blocks:
            assert self.refs[b] > 0, f"block {b} is free"
            self.refs[b] += 1

    def release(self, blocks: list[int]) -> None:
        """One reference fewer to each of `blocks`; a block whose last goes is free again."""
        for b in blocks:
            assert self.refs[b] > 0, f"block {b} released twice"
            self.refs[b] -= 1
            if self.refs[b] == 0:
                self._free[b] = 1
                self._free_count += 1

    def _grow(self, need: int) -> None:
        """At least `need` blocks: double (within `max_bytes`), copying the tensors once."""
        cap = max(need, 2 * self.capacity, 4)
        per_block = self.bytes_per_block()
        if self.max_bytes is not None and per_block:
            budget = self.max_bytes // per_block
            cap = max(need, budget if self.preallocate else min(cap, budget))
        old = self.capacity
        for layer in self.layers:
            for name, buf in layer.items():
                grown = _blocks(cap, self.block_size, buf.shape[2], buf.shape[3], buf.dtype, buf.device)
                grown[:old] = buf
                layer[name] = grown
        self.refs.extend([0] * (cap - old))
        self._free.extend(b"\x01" * (cap - old))
        self._free_count += cap - old

    # --- rows ----------------------------------------------------------------------

    def grow_to(self, table: BlockTable, tokens: int) -> list[int]:
        """Blocks for `table` to hold `tokens` tokens (allocation as a row grows): the new ones."""
        new = self.allocate(max(0, blocks_for(tokens, self.block_size) - len(table.blocks)),
                            after=table.blocks[-1] if table.blocks else None)
        table.blocks.extend(new)
        return new

    def fork(self, table: BlockTable, length: int) -> BlockTable:
        """A table of the first `length` tokens of `table`, sharing its full blocks by
        reference; a partially used last block is copied (the new row writes into it)."""
        n = blocks_for(length, self.block_size)
        full = length // self.block_size
        shared = table.blocks[:full]
        self.share(shared)
        out = BlockTable(list(shared), length)
        if n > full:
            out.blocks.append(self.copy_block(table.blocks[full]))
        return out

    def copy_block(self, src: int) -> int:
        """A fresh block holding what `src` holds (copy on write)."""
        (dst,) = self.allocate(1)
        for layer in self.layers:
            for buf in layer.values():
                buf[dst] = buf[src]
        return dst

    def free_table(self, table: BlockTable) -> None:
        """The row is done: its references go (shared blocks stay with their other holders)."""
        self.release(table.blocks)
        table.blocks, table.length = [], 0

    # --- entries -------------------------------------------------------------------

    def storage(self, layer: int, name: str, like: torch.Tensor) -> torch.Tensor:
        """Layer `layer`'s tensor of entry `name` (blocks, block_size, H, D), made at the first
        write from an entry `like` (B, H, T, D): its heads, width and dtype. Zeros, as new
        blocks are: a slot past a row's length is masked, never read, but a masked weight
        times a NaN value would still be NaN (SDPA with a float mask), so a slot holds a
        finite value from the start (zeros, or what an earlier row wrote)."""
        buf = self.layers[layer].get(name)
        if buf is None:
            assert self.capacity > 0, "allocate a block before the first write"
            buf = _blocks(self.capacity, self.block_size, like.shape[1], like.shape[3], like.dtype, self.device)
            self.layers[layer][name] = buf
        return buf

    def flat(self, layer: int, name: str) -> torch.Tensor:
        """Layer `layer`'s entry `name` as slots (blocks * block_size, H, D) (a view)."""
        buf = self.layers[layer][name]
        return buf.view(-1, *buf.shape[2:])

    def row(self, layer: int, name: str, start: int | None, blocks: torch.Tensor, n: int) -> torch.Tensor:
        """A row's first n tokens of layer `layer`'s entry `name` (1, H, n, D): a view of the
        pool when its blocks are consecutive from slot `start`, else its `blocks` (1, nb)
        gathered (a copy of that row only)."""
        buf = self.layers[layer][name]
        return _heads(buf)[None, :, start : start + n] if start is not None else gather(buf, blocks, n)

    def slots(self, table: BlockTable, lo: int, hi: int) -> torch.Tensor:
        """Slots of the row's tokens [lo, hi) (hi within its blocks), (hi - lo,) long on the device."""
        bs = self.block_size
        blocks = torch.tensor(table.blocks, dtype=torch.long)
        pos = torch.arange(lo, hi)
        return (blocks[pos // bs] * bs + pos % bs).to(self.device, non_blocking=True)

    def bytes_per_token(self) -> int:
        """Bytes one token takes over every layer and entry (0 before the first write)."""
        return sum(buf[0, 0].numel() * buf.element_size() for layer in self.layers for buf in layer.values())

    def bytes_per_block(self) -> int:
        return self.block_size * self.bytes_per_token()

    @property
    def nbytes(self) -> int:
        """Bytes the pool's tensors hold (free blocks included)."""
        return sum(buf.numel() * buf.element_size() for layer in self.layers for buf in layer.values())

    def used_bytes(self) -> int:
        """Bytes of the blocks some row or cached prefix holds."""
        return self.used_blocks * self.bytes_per_block()


def _blocks(n: int, block_size: int, heads: int, dim: int, dtype: torch.dtype,
            device: torch.device) -> torch.Tensor:
    """A pool entry's tensor of n zero blocks, (n, block_size, H, D) over memory laid out
    head-major (H, n, block_size, D): within a head, consecutive blocks are consecutive
    tokens, so a row whose blocks are consecutive reads as a (1, H, T, D) view whose tokens
    are contiguous per head, the layout SDPA reads fastest (a token-major view makes it
    copy or stride)."""
    return torch.zeros(heads, n, block_size, dim, dtype=dtype, device=device).permute(1, 2, 0, 3)


def _heads(buf: torch.Tensor) -> torch.Tensor:
    """A pool entry (blocks, block_size, H, D) as its memory (H, blocks * block_size, D) (a view)."""
    return buf.permute(2, 0, 1, 3).reshape(buf.shape[2], -1, buf.shape[3])


def run_start(blocks: list[int], n: int, block_size: int) -> int | None:
    """The first slot of a row's first n blocks when they are consecutive (the row reads as
    a view of the pool), else None (the row is gathered)."""
    if not blocks[:n]:
        return None
    first = blocks[0]
    return first * block_size if blocks[:n] == list(range(first, first + n)) else None


def gather(buf: torch.Tensor, blocks: torch.Tensor, width: int) -> torch.Tensor:
    """The gather path: the rows' blocks (B, nb) of a pool entry's `buf` (blocks, block_size,
    H, D) -> their first `width` tokens (B, H, width, D) (a strided view of one fresh tensor:
    whole blocks copied), what a kernel without a block table reads (Triton's, on CUDA)."""
    b, nb = blocks.shape
    h = buf.shape[2]
    per_head = buf.permute(2, 0, 1, 3)  # (H, blocks, block_size, D), the memory's order
    rows = per_head.index_select(1, blocks.reshape(-1)).view(h, b, nb * buf.shape[1], buf.shape[3])
    return rows[:, :, :width].transpose(0, 1)


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
            pool.storage(self.index, name, x)
            flat = pool.flat(self.index, name)
            flat[write] = x[0].transpose(0, 1).to(flat.dtype)  # (t, H, D)
            out[name] = pool.row(self.index, name, start, read, new_len)
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
        """Slots to write (tokens [lo, hi)), the first slot of tokens [0, hi) when their
        blocks are consecutive (read as a view) and those blocks (1, nb) (else gathered):
        made by the first layer of a forward, shared by the rest."""
        if self._slots is None or self._slots[:2] != (lo, hi):
            nb = blocks_for(hi, self.pool.block_size)
            blocks = self.table.blocks[:nb]
            read = torch.tensor([blocks], dtype=torch.long).to(self.pool.device, non_blocking=True)
            start = run_start(blocks, nb, self.pool.block_size)
            self._slots = (lo, hi, self.pool.slots(self.table, lo, hi), start, read)
        return self._slots[2:]

    @property
    def length(self) -> int:
        return self.layers[0].length if self.layers else self.table.length

    def entries(self) -> list[dict[str, torch.Tensor]]:
        """Every layer's entries (1, H, length, D), gathered (a copy: tests and inspection)."""
        _, _, read = self.slots(self.length, self.length)
        return [{name: gather(buf, read, self.length) for name, buf in self.pool.layers[i].items()}
                for i in range(self.pool.num_layers)]

    def own_run(self, tokens: int) -> None:
        """The row's blocks as one run of its own with room for `tokens`: its blocks (shared
        ones too) copied into a fresh run, then let go. A row that will be read at many steps
        (a decoding row on the PyTorch backends) is then a view of the pool at every one,
        for one copy now instead of a gather per step."""
        pool, old = self.pool, self.table.blocks
        new = pool.allocate(blocks_for(max(tokens, self.table.length), pool.block_size))
        if old:
            src = torch.tensor(old, dtype=torch.long, device=pool.device)
            dst = torch.tensor(new[: len(old)], dtype=torch.long, device=pool.device)
            for layer in pool.layers:
                for buf in layer.values():
                    buf[dst] = buf.index_select(0, src)
        pool.release(old)
        self.table.blocks = new
        self._slots = None

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


class PagedRows:
    """One entry of a decoding batch read row by row (the PyTorch backends' read): `row(b, n)`
    is row b's first n tokens (1, H, n, D), a view of the pool when the row's blocks are
    consecutive (as the pool allocates them), else that row gathered."""

    def __init__(self, batch: PagedBatch, layer: int, name: str, t: int) -> None:
        self.buf = batch.pool.layers[layer][name]
        self.heads = _heads(self.buf)  # (H, slots, D)
        self.reads = batch.row_reads(t)

    def row(self, b: int, n: int) -> torch.Tensor:
        start, blocks = self.reads[b]
        return self.heads[None, :, start : start + n] if start is not None else gather(self.buf, blocks, n)


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
            flat = pool.flat(self.index, name)
            flat[write] = x.transpose(1, 2).reshape(-1, x.shape[1], x.shape[3]).to(flat.dtype)  # (B*t, H, D)
        return t

    def append(self, **entries: torch.Tensor) -> dict[str, torch.Tensor]:
        blocks, width = self.batch.read_blocks(self._store(entries))
        return {name: gather(self.batch.pool.layers[self.index][name], blocks, width) for name in entries}

    def rows(self, **entries: torch.Tensor) -> dict[str, torch.Tensor | PagedRows]:
        """`append` read row by row (`PagedRows`), for attention that runs a row at a time
        (the PyTorch backends); gathered as `append` when the batch is `full_width` (a
        captured step's shapes cannot follow each row's length)."""
        if self.batch.full_width:
            return self.append(**entries)
        t = self._store(entries)
        return {name: PagedRows(self.batch, self.index, name, t) for name in entries}

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
        """Tokens a row may reach (the most any joined row reserved): the table's width in tokens."""
        return self._capacity

    def join(self, seq: PagedSeq, reserve: int) -> None:
        """Add `seq`'s row at the end of the batch; its table moves here (the seq is left
        empty). `reserve` is the length this row may reach."""
        table, seq.table = seq.table, BlockTable()
        table.length = seq.length
        self.tables.append(table)
        self._host_lengths.append(table.length)
        self._capacity = max(self._capacity, reserve, table.length)
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
                start = run_start(table.blocks, nb, bs)
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
