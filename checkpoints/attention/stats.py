"""Row statistics of attention weights (`RowStats`): from a dense weight
matrix (the oracle) or accumulated key block by key block (long inputs), so
a diagnostic over a long input never needs an N x N matrix.

The entropy of the l1-normalised |w| streams without a second pass over the
normaliser: with A = sum |w| and E = sum |w| log |w| (0 log 0 = 0),
H = -sum (|w|/A) log(|w|/A) = log A - E / A."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RowStats:
    """Per-(batch, head, query row) statistics of one layer's attention weights,
    accumulated block by block so long inputs never need an N x N matrix.
    Every tensor is float32 of shape (B, Hq, T); `visible` is the number of keys
    the row can see (causal, after any window)."""

    layer: int
    abs_sum: torch.Tensor  # sum_j |w_ij|
    zeros: torch.Tensor  # count of exact zeros among visible keys
    first: torch.Tensor  # w_i0, the (signed) weight on key 0
    entropy: torch.Tensor  # H_i of b_ij = |w_ij| / sum_j |w_ij| (0 for silent rows)
    visible: torch.Tensor  # n_i


def _plogp(a: torch.Tensor) -> torch.Tensor:
    return torch.where(a > 0, a * torch.log(a.clamp_min(torch.finfo(torch.float32).tiny)), 0.0)


def entropy_from_sums(abs_sum: torch.Tensor, plogp: torch.Tensor) -> torch.Tensor:
    """H = log A - E / A; 0 for rows with A == 0 (silent rows)."""
    safe = abs_sum.clamp_min(torch.finfo(torch.float32).tiny)
    return torch.where(abs_sum > 0, torch.log(safe) - plogp / safe, 0.0).clamp_min(0.0)


def stats_from_weights(w: torch.Tensor, visible: torch.Tensor, layer: int) -> RowStats:
    """Statistics of dense weights w (B, H, T, S) with a visibility mask
    broadcastable to it (True where the key is visible)."""
    w = w.float()
    visible = visible.expand_as(w)
    a = w.abs() * visible
    abs_sum = a.sum(-1)
    return RowStats(
        layer=layer,
        abs_sum=abs_sum,
        zeros=((w == 0) & visible).sum(-1).float(),
        first=(w[..., 0] * visible[..., 0]) if w.shape[-1] else torch.zeros_like(abs_sum),
        entropy=entropy_from_sums(abs_sum, _plogp(a).sum(-1)),
        visible=visible.sum(-1).float(),
    )


class StreamingStats:
    """Accumulates `RowStats` over key blocks of final (not running) weights."""

    def __init__(self, shape: tuple[int, ...], device: torch.device) -> None:
        z = lambda: torch.zeros(shape, dtype=torch.float32, device=device)  # noqa: E731
        self.abs_sum, self.zeros, self.first, self.plogp, self.visible = z(), z(), z(), z(), z()

    def update(self, w: torch.Tensor, visible: torch.Tensor, key_start: int) -> None:
        """w (..., n) weights of keys key_start .. key_start + n - 1; visible
        broadcastable to w."""
        visible = visible.expand_as(w)
        a = w.abs() * visible
        self.abs_sum += a.sum(-1)
        self.plogp += _plogp(a).sum(-1)
        self.zeros += ((w == 0) & visible).sum(-1)
        self.visible += visible.sum(-1)
        if key_start == 0 and w.shape[-1]:
            self.first += w[..., 0] * visible[..., 0]

    def finish(self, layer: int) -> RowStats:
        return RowStats(
            layer=layer,
            abs_sum=self.abs_sum,
            zeros=self.zeros,
            first=self.first,
            entropy=entropy_from_sums(self.abs_sum, self.plogp),
            visible=self.visible,
        )



class BlockedStats:
    """Row statistics of a streaming path that walks query blocks, each over
    key blocks: `begin` a query block, `update` it key block by key block,
    `end` it; `result` is the RowStats (B, Hq, T), or None when not collecting
    (then every call is a no-op)."""

    def __init__(self, collect: bool, b: int, hq: int, t: int, device: torch.device, layer: int) -> None:
        self.collect, self.shape, self.device, self.layer = collect, (b, hq, t), device, layer
        self.parts: list[RowStats] = []
        self.block: StreamingStats | None = None

    def begin(self, shape: tuple[int, ...]) -> None:
        """A query block whose weights are (*shape, keys): (B, Hkv, G, n)."""
        self.block = StreamingStats(shape, self.device) if self.collect else None

    def update(self, w: torch.Tensor, visible: torch.Tensor, key_start: int) -> None:
        if self.block is not None:
            self.block.update(w, visible, key_start)

    def end(self) -> None:
        if self.block is not None:
            self.parts.append(self.block.finish(self.layer))

    def result(self) -> RowStats | None:
        """Per-query-block statistics concatenated along the rows (empty for T = 0)."""
        if not self.collect:
            return None
        b, hq, t = self.shape
        if not self.parts:
            z = torch.zeros(b, hq, t, device=self.device)
            return RowStats(layer=self.layer, abs_sum=z, zeros=z.clone(), first=z.clone(), entropy=z.clone(),
                            visible=z.clone())

        def cat(name: str) -> torch.Tensor:
            return torch.cat([getattr(p, name).reshape(b, hq, -1) for p in self.parts], dim=2)

        return RowStats(layer=self.layer, abs_sum=cat("abs_sum"), zeros=cat("zeros"), first=cat("first"),
                        entropy=cat("entropy"), visible=cat("visible"))
