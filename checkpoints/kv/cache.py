"""KV cache of one sequence or one padded batch (generate.py's oracle, a padded prefill):
per-layer named tensors (B, H, T, D) in buffers that grow by doubling, so decoding N
tokens costs O(N) copies, not O(N^2). The engine's rows and decoding batch live in the
paged KV pool (`block_pool.py`, `paged_seq.py`, `paged_batch.py`)."""

from __future__ import annotations

import torch


class LayerCache:
    """Named cache entries for one layer (a variant may keep k, v, k2, ...)."""

    def __init__(self) -> None:
        self._buffers: dict[str, torch.Tensor] = {}
        self.length = 0  # tokens stored

    def append(self, **entries: torch.Tensor) -> dict[str, torch.Tensor]:
        """Append (B, H, t, D) tensors along T; return views of everything stored so far.
        All entries of one call must have the same t."""
        t = next(iter(entries.values())).shape[2]
        new_len = self.length + t
        out = {}
        for name, x in entries.items():
            buf = self._buffers.get(name)
            if buf is None or buf.shape[2] < new_len:
                cap = max(new_len, 2 * (buf.shape[2] if buf is not None else 0), 16)
                grown = x.new_empty(*x.shape[:2], cap, *x.shape[3:])
                if buf is not None:
                    grown[:, :, : self.length] = buf[:, :, : self.length]
                self._buffers[name] = buf = grown
            buf[:, :, self.length : new_len] = x
            out[name] = buf[:, :, :new_len]
        self.length = new_len
        return out

    def get(self, name: str) -> torch.Tensor:
        return self._buffers[name][:, :, : self.length]

    def preload(self, entries: dict[str, torch.Tensor], capacity: int) -> None:
        """Start from `entries` (B, H, n, D) each (a cached prefix), with room for
        `capacity` tokens so the prefill of the rest does not regrow the buffers."""
        n = next(iter(entries.values())).shape[2]
        for name, x in entries.items():
            buf = x.new_empty(*x.shape[:2], max(capacity, n, 16), *x.shape[3:])
            buf[:, :, :n] = x
            self._buffers[name] = buf
        self.length = n

    def entries(self) -> dict[str, torch.Tensor]:
        """Views of everything stored, (B, H, length, D) per name."""
        return {name: buf[:, :, : self.length] for name, buf in self._buffers.items()}


class KVCache:
    """One `LayerCache` per layer; `length` is the number of tokens seen."""

    def __init__(self, num_layers: int) -> None:
        self.layers = [LayerCache() for _ in range(num_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].length if self.layers else 0

    def fork(self) -> KVCache:
        """An independent copy (the cached prefix of several continuations)."""
        copy = KVCache(len(self.layers))
        for mine, theirs in zip(self.layers, copy.layers, strict=True):
            theirs._buffers = {name: buf[:, :, : mine.length].clone() for name, buf in mine._buffers.items()}
            theirs.length = mine.length
        return copy

    def entries(self, length: int | None = None) -> list[dict[str, torch.Tensor]]:
        """Views of the first `length` tokens (default: all) of every layer's entries."""
        n = self.length if length is None else length
        return [{name: x[:, :, :n] for name, x in layer.entries().items()} for layer in self.layers]

    def row(self, b: int, length: int) -> KVCache:
        """Row b of a batched cache, its first `length` tokens, as a single-row cache
        (views: a right-padded batched prefill hands each prompt its own cache)."""
        out = KVCache(len(self.layers))
        for mine, theirs in zip(self.layers, out.layers, strict=True):
            theirs._buffers = {name: buf[b : b + 1, :, :length] for name, buf in mine._buffers.items()}
            theirs.length = length
        return out

    def bytes_per_token(self) -> int:
        """Cache bytes one token of one row takes, over every layer and entry."""
        return sum(buf[:1, :, :1].numel() * buf.element_size() for layer in self.layers
                   for buf in layer._buffers.values())
