"""The causal mask every variant shares.

Query t of a chunk sits at absolute position `q_offset + t` and sees the keys
j <= q_offset + t (bottom-right aligned, so chunked prefill and decode over a
cache see what a full prefill sees); with a sliding window W also only
j > q_offset + t - W."""

from __future__ import annotations

import torch


def causal_mask(
    tq: int, tk: int, q_offset: int, device: torch.device, window: int | None = None
) -> torch.Tensor:
    """Bool (tq, tk): True where query i may see key j (bottom-right aligned)."""
    qpos = torch.arange(q_offset, q_offset + tq, device=device)[:, None]
    kpos = torch.arange(tk, device=device)[None, :]
    visible = kpos <= qpos
    if window is not None:
        visible &= kpos > qpos - window
    return visible
