"""How a row of the paged pool is read: a view of the pool when its blocks are one run of
consecutive blocks (tokens contiguous per head: nothing copied), else gathered (a copy).

- `run_start`: the first slot of a row's blocks when they are one run, else None.
- `row`: one row's first n tokens (1, H, n, D), a view or that row gathered.
- `gather`: rows' blocks (B, nb) -> their first tokens (B, H, width, D), one `index_select`
  of whole blocks: the read of a kernel without a block table (Triton's prefill and
  decode kernels, and every variant whose decode is not paged). It is the plain PyTorch
  twin of `decode_paged` (`checkpoints/attention/softmax/triton.py`), which reads the
  pool through the block table; `tests/checkpoints/attention/softmax/test_triton_softmax_family.py`
  compares the two.
- `PagedRows`: a decoding batch's entry read row by row (the PyTorch backends' read).

Shapes: a pool entry (blocks, block_size, H, D) over memory laid out head-major
(`checkpoints.kv.storage`); what is read (B, H, T, D) as everywhere in `checkpoints.attention`.
Every read that copies goes through `gather` (tests count its calls)."""

from __future__ import annotations

import torch


def heads(buf: torch.Tensor) -> torch.Tensor:
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


def row(buf: torch.Tensor, start: int | None, blocks: torch.Tensor, n: int) -> torch.Tensor:
    """A row's first n tokens of the pool entry `buf` (1, H, n, D): a view of the pool when
    its blocks are consecutive from slot `start`, else its `blocks` (1, nb) gathered (a copy
    of that row only)."""
    return heads(buf)[None, :, start : start + n] if start is not None else gather(buf, blocks, n)


class PagedRows:
    """One entry of a decoding batch read row by row (the PyTorch backends' read): `row(b, n)`
    is row b's first n tokens (1, H, n, D), a view of the pool when the row's blocks are
    consecutive (as the pool allocates them), else that row gathered. `reads`: per row,
    (first slot, None) for a run or (None, its blocks (1, nb)) (`PagedBatch.row_reads`)."""

    def __init__(self, buf: torch.Tensor, reads: list[tuple[int | None, torch.Tensor | None]]) -> None:
        self.buf = buf
        self.heads = heads(buf)  # (H, slots, D)
        self.reads = reads

    def row(self, b: int, n: int) -> torch.Tensor:
        start, blocks = self.reads[b]
        return self.heads[None, :, start : start + n] if start is not None else gather(self.buf, blocks, n)
