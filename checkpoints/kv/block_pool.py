"""The paged KV pool's bookkeeping (vLLM's `block_pool.py`): every row's keys and values
live in fixed-size blocks of one pool, found through the row's block table; this module
says which blocks are free, who holds each, and which blocks a row gets. The tensors are
`storage.KVStorage`'s (the pool owns one and grows it); the rows as caches are
`paged_seq.PagedSeq` and `paged_batch.PagedBatch`; reading a row, `views`.

- `BlockPool`: free blocks (a bytearray: a run of n is one `find`) and a reference count
  per block: a block is free again when its last reference goes. Blocks are handed out
  consecutive where the pool allows (`allocate`): a row whose blocks are one run reads as
  a view of the pool (`views.run_start`). On the CPU the pool grows by doubling (never past
  `max_bytes` unless one allocation needs more), so an engine holds what it used, not its
  budget; on CUDA it takes `max_bytes` at once when the first row's size per token is known
  (vLLM preallocates: doubling a pool near its budget would hold 1.5x the budget while copying).
- `BlockTable`: a row's blocks in position order; token p of the row is slot
  `blocks[p // block_size] * block_size + p % block_size`. A row holds
  ceil(length / block_size) blocks: rows of any length waste at most one partial block.
- `BlockPool.reserve`: the one call that takes a row's reserve from the pool (the
  scheduler's count, `Scheduler.allocate`), at the row's prefill.
- Sharing is by reference: `BlockPool.fork` hands a prefix's blocks to another table
  (refcount + 1, no copy), copying only a partially filled last block, which the new row
  will write into (copy on write, as vLLM does)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from checkpoints.kv.storage import KVStorage

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
    """Fixed-size blocks of every layer's KV entries (`tensors`), a free list and reference
    counts. `max_bytes` caps how far the tensors grow by doubling (None: no cap; an
    allocation that needs more still gets it: the engine admits its first row whatever the
    budget). `preallocate` (default: on CUDA) grows straight to `max_bytes` once a block's
    size is known."""

    def __init__(self, num_layers: int, device: torch.device | str = "cpu", block_size: int = DEFAULT_BLOCK_SIZE,
                 max_bytes: int | None = None, preallocate: bool | None = None) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.num_layers, self.block_size = num_layers, block_size
        self.tensors = KVStorage(num_layers, device, block_size)
        self.device = self.tensors.device
        self.max_bytes = max_bytes
        self.preallocate = self.device.type == "cuda" if preallocate is None else preallocate
        self.refs: list[int] = []  # per block
        self._free = bytearray()  # per block: 1 while free (a run of n free blocks is one `find`)
        self._free_count = 0
        self.peak_blocks = 0  # the most blocks held at once (bench/kv_memory.py reports it)

    @property
    def layers(self) -> list[dict[str, torch.Tensor]]:
        """The tensors per layer and entry name, (blocks, block_size, H, D) each (`tensors.layers`)."""
        return self.tensors.layers

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
        consecutive is read as a view of the pool (`views.run_start`): nothing gathered."""
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
        self.tensors.grow(cap)
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

    def reserve(self, table: BlockTable, tokens: int, one_run: bool = False) -> None:
        """Blocks for every token the row may reach (`tokens`: the scheduler's `reserve`), taken
        at its prefill: the one call between the scheduler and the pool (`Scheduler.allocate`).
        The row's blocks grow (its run in place where the blocks after it are free), or with
        `one_run`, a row that holds blocks already (a prefix-cache hit, shared ones too) is
        copied into a fresh run of its own, then lets the old ones go: a row read at many steps
        (a decoding row on the PyTorch backends) is then a view of the pool at every one, for
        one copy now instead of a gather per step."""
        if not (one_run and table.blocks):
            self.grow_to(table, tokens)
            return
        old = table.blocks
        new = self.allocate(blocks_for(max(tokens, table.length), self.block_size))
        self.tensors.copy_blocks(old, new[: len(old)])
        self.release(old)
        table.blocks = new

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
        self.tensors.copy_block(src, dst)
        return dst

    def free_table(self, table: BlockTable) -> None:
        """The row is done: its references go (shared blocks stay with their other holders)."""
        self.release(table.blocks)
        table.blocks, table.length = [], 0

    # --- bytes ---------------------------------------------------------------------

    def bytes_per_token(self) -> int:
        """Bytes one token takes over every layer and entry (0 before the first write)."""
        return self.tensors.bytes_per_token()

    def bytes_per_block(self) -> int:
        return self.block_size * self.bytes_per_token()

    @property
    def nbytes(self) -> int:
        """Bytes the pool's tensors hold (free blocks included)."""
        return self.tensors.nbytes

    def used_bytes(self) -> int:
        """Bytes of the blocks some row or cached prefix holds."""
        return self.used_blocks * self.bytes_per_block()
