"""KV cache: per-layer named tensors (B, H, T, D) in buffers that grow by doubling,
so decoding N tokens costs O(N) copies, not O(N^2)."""

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


class RaggedLayerCache:
    """One layer's entries for a batch of rows of different lengths: (B, H, cap, D)
    buffers; row b's tokens are [0, lengths[b]), the rest is never read."""

    def __init__(self, parent: RaggedKVCache) -> None:
        self.parent = parent
        self._buffers: dict[str, torch.Tensor] = {}

    @property
    def buffers(self) -> dict[str, torch.Tensor]:
        """The (B, H, cap, D) buffers, rows that joined since the last read copied in."""
        self.parent.flush()
        return self._buffers

    def append(self, **entries: torch.Tensor) -> dict[str, torch.Tensor]:
        """Write t tokens per row, (B, H, t, D) each, from the row's own length on (t > 1:
        a drafted continuation being verified); return views (B, H, max length + t, D), or
        the whole buffers when the batch is `full_width` (a CUDA graph's shapes cannot
        follow the length). Row b's keys are its first `lengths[b] + t`; query i of row b
        sees the first `lengths[b] + i + 1`."""
        pos = self.parent.lengths
        t = next(iter(entries.values())).shape[2]
        rows = torch.arange(pos.shape[0], device=pos.device)
        width = self.parent.capacity if self.parent.full_width else self.parent.max_length + t
        out = {}
        for name, x in entries.items():
            buf = self.buffers[name]
            if t == 1:
                buf[rows, :, pos] = x[:, :, 0]
            else:  # (B, t) row and position indices around the head slice: values (B, t, H, D)
                at = pos[:, None] + torch.arange(t, device=pos.device)
                buf[rows[:, None], :, at] = x.transpose(1, 2)
            out[name] = buf[:, :, :width]
        return out


class RaggedKVCache:
    """KV cache of a decoding batch whose rows have their own lengths (continuous
    batching): rows join from a single-row `KVCache` after their prefill and leave
    when they finish. `lengths` (B,) long is each row's number of cached tokens;
    a decode step writes row b's new token at position `lengths[b]`.

    Rows that join between two steps are copied in together, at the next read of the
    buffers (`flush`): one copy of the batch per admission, not one per row (a batch of
    B rows joined one by one copied B^2 / 2 rows: 4.6 of 62 s of a 2k x 16 RULER run).

    `full_width`: a decode step's attention gets the whole buffers (keys past a row's
    length are never read), so the step's shapes stay the same from step to step and a
    CUDA graph captured once replays until a row joins or leaves (`layout`)."""

    def __init__(self, num_layers: int, device: torch.device) -> None:
        self.layers = [RaggedLayerCache(self) for _ in range(num_layers)]
        self.lengths = torch.zeros(0, dtype=torch.long, device=device)
        self._host_lengths: list[int] = []
        self._joining: list[tuple[KVCache, int]] = []  # (single-row cache, its length) not yet copied in
        self._capacity = 0
        self.full_width = False

    @classmethod
    def empty_like(cls, cache: KVCache) -> RaggedKVCache:
        device = next(iter(cache.layers[0]._buffers.values())).device
        return cls(len(cache.layers), device)

    @property
    def batch_size(self) -> int:
        return len(self._host_lengths)

    @property
    def max_length(self) -> int:
        return max(self._host_lengths, default=0)

    @property
    def host_lengths(self) -> list[int]:
        """`lengths` on the host (kept beside it: reading the device tensor would synchronise)."""
        return list(self._host_lengths)

    @property
    def capacity(self) -> int:
        """Tokens each row's buffers hold (the most any joined row reserved)."""
        return self._capacity

    def join(self, cache: KVCache, reserve: int) -> None:
        """Add the single row of `cache` at the end of the batch; `reserve` is the
        length this row may reach, so buffers grow once, not every step. Copied in with
        the other rows joining before the next read (`flush`)."""
        n = cache.length
        self._capacity = max(self._capacity, reserve, n)
        self._joining.append((cache, n))
        self._host_lengths.append(n)
        self.lengths = torch.tensor(self._host_lengths, dtype=torch.long, device=self.lengths.device)

    def flush(self) -> None:
        """Copy the rows that joined since the last read into new buffers, with the rows
        already there: one allocation and one copy per buffer."""
        if not self._joining:
            return
        joining, self._joining = self._joining, []
        cap = self._capacity
        for i, mine in enumerate(self.layers):
            for name, src in joining[0][0].layers[i]._buffers.items():
                old = mine._buffers.get(name)
                kept = old.shape[0] if old is not None else 0
                buf = src.new_zeros(kept + len(joining), src.shape[1], cap, *src.shape[3:])
                if old is not None:
                    buf[:kept, :, : old.shape[2]] = old
                for r, (cache, n) in enumerate(joining):
                    buf[kept + r, :, :n] = cache.layers[i]._buffers[name][0, :, :n]
                mine._buffers[name] = buf

    def keep(self, rows: list[int]) -> None:
        """Keep only `rows` (indices into the batch), in that order."""
        self.flush()
        index = torch.tensor(rows, dtype=torch.long, device=self.lengths.device)
        for layer in self.layers:
            layer._buffers = {name: buf.index_select(0, index) for name, buf in layer._buffers.items()}
        self._host_lengths = [self._host_lengths[i] for i in rows]
        self.lengths = self.lengths.index_select(0, index)

    def prepare(self, t: int = 1) -> None:
        """Nothing to allocate before a step (`PagedBatch.prepare`'s twin): rows are `capacity` wide."""

    def advance(self, counts: list[int] | None = None) -> None:
        """After a decode step: every row holds one more token (`lengths` in place: a captured
        step reads it where it is); after a verifying step, row b holds `counts[b]` more (the
        tokens its accepted draft and the step's input made; the rest it wrote is never read
        and the next step overwrites it)."""
        if counts is None:
            self._host_lengths = [n + 1 for n in self._host_lengths]
            self.lengths.add_(1)
            return
        self._host_lengths = [n + c for n, c in zip(self._host_lengths, counts, strict=True)]
        self.lengths.add_(torch.tensor(counts, dtype=torch.long).to(self.lengths.device, non_blocking=True))

    def layout(self) -> tuple:
        """Where the step's tensors live: the rows, the capacity and every buffer's and the
        lengths' addresses. Equal layouts can replay the same captured step; a join or a
        `keep` makes a new one."""
        self.flush()
        return (self.batch_size, self.capacity, self.lengths.data_ptr(),
                *(buf.data_ptr() for layer in self.layers for buf in layer._buffers.values()))
