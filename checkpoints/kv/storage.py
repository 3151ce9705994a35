"""The paged pool's tensors (the cache storage, apart from the bookkeeping in
`block_pool.py`, as vLLM keeps its KV-cache tensors apart from its block pool): per layer
and cached name (k, v, and whatever else a variant caches) one tensor (blocks, block_size,
H, D), laid out head-major in memory (H, blocks * block_size, D); a block id names the same
block in every layer. A tensor is made at the first write of its name (its heads, width
and dtype come from that entry) and grows when the pool grows (`BlockPool` decides when
and how far)."""

from __future__ import annotations

import torch


def new_blocks(n: int, block_size: int, heads: int, dim: int, dtype: torch.dtype,
               device: torch.device) -> torch.Tensor:
    """A pool entry's tensor of n zero blocks, (n, block_size, H, D) over memory laid out
    head-major (H, n, block_size, D): within a head, consecutive blocks are consecutive
    tokens, so a row whose blocks are consecutive reads as a (1, H, T, D) view whose tokens
    are contiguous per head, the layout SDPA reads fastest (a token-major view makes it
    copy or stride)."""
    return torch.zeros(heads, n, block_size, dim, dtype=dtype, device=device).permute(1, 2, 0, 3)


class KVStorage:
    """Every layer's entries of the pool's blocks: `layers[i][name]` (blocks, block_size, H, D)."""

    def __init__(self, num_layers: int, device: torch.device | str, block_size: int) -> None:
        self.device, self.block_size = torch.device(device), block_size
        self.layers: list[dict[str, torch.Tensor]] = [{} for _ in range(num_layers)]

    def entry(self, layer: int, name: str, like: torch.Tensor, blocks: int) -> torch.Tensor:
        """Layer `layer`'s tensor of entry `name`, made at the first write (`blocks` blocks) from
        an entry `like` (B, H, T, D): its heads, width and dtype. Zeros, as new blocks are: a
        slot past a row's length is masked, never read, but a masked weight times a NaN value
        would still be NaN (SDPA with a float mask), so a slot holds a finite value from the
        start (zeros, or what an earlier row wrote)."""
        buf = self.layers[layer].get(name)
        if buf is None:
            assert blocks > 0, "allocate a block before the first write"
            buf = new_blocks(blocks, self.block_size, like.shape[1], like.shape[3], like.dtype, self.device)
            self.layers[layer][name] = buf
        return buf

    def flat(self, layer: int, name: str) -> torch.Tensor:
        """Layer `layer`'s entry `name` as slots (blocks * block_size, H, D) (a view)."""
        buf = self.layers[layer][name]
        return buf.view(-1, *buf.shape[2:])

    def grow(self, blocks: int) -> None:
        """Every tensor to `blocks` blocks, what it held copied (once) into the first ones."""
        for layer in self.layers:
            for name, buf in layer.items():
                grown = new_blocks(blocks, self.block_size, buf.shape[2], buf.shape[3], buf.dtype, buf.device)
                grown[: buf.shape[0]] = buf
                layer[name] = grown

    def copy_block(self, src: int, dst: int) -> None:
        """Block `dst` holds what block `src` holds, in every layer and entry."""
        for layer in self.layers:
            for buf in layer.values():
                buf[dst] = buf[src]

    def copy_blocks(self, src: list[int], dst: list[int]) -> None:
        """Blocks `dst` hold what blocks `src` hold (one indexed copy per tensor)."""
        if not src:
            return
        at = torch.tensor(src, dtype=torch.long, device=self.device)
        to = torch.tensor(dst, dtype=torch.long, device=self.device)
        for layer in self.layers:
            for buf in layer.values():
                buf[to] = buf.index_select(0, at)

    def bytes_per_token(self) -> int:
        """Bytes one token takes over every layer and entry (0 before the first write)."""
        return sum(buf[0, 0].numel() * buf.element_size() for layer in self.layers for buf in layer.values())

    @property
    def nbytes(self) -> int:
        """Bytes the tensors hold (free blocks included)."""
        return sum(buf.numel() * buf.element_size() for layer in self.layers for buf in layer.values())
