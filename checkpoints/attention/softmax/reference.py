"""Dense softmax-family attention: the spec and the oracle of the streaming
paths, returning the weights.

Shapes: q (B, Hq, T, D); k, v (B, Hkv, S, D) with Hq a multiple of Hkv; query
t sits at absolute position `q_offset + t` and sees keys j <= q_offset + t
(and, with a sliding window W, j > q_offset + t - W). With a softcap c
(Gemma 2) the scaled dot product z becomes `c tanh(z / c)` before any bias,
sign or mask. Rows with no visible key output exactly zero and have zero
weights."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from checkpoints.attention.gqa import dense_dots, expand_kv
from checkpoints.attention.masks import causal_mask
from checkpoints.attention.position import alibi_bias


class Logits(NamedTuple):
    """How a row's logits are formed: `z = scale * q.k`, softcapped to `c tanh(z / c)`
    when `softcap` is c, its absolute value when `signed`, plus ALiBi `slopes` (Hq,)
    times (j - i), inside a sliding `window`."""

    scale: float
    slopes: torch.Tensor | None = None
    window: int | None = None
    signed: bool = False
    softcap: float | None = None


def softcap_logits(z: torch.Tensor, cap: float | None) -> torch.Tensor:
    """`cap * tanh(z / cap)` (Gemma 2's logit softcapping); z itself when cap is None."""
    return z if cap is None else torch.tanh(z / cap) * cap


def dense_logits(
    q: torch.Tensor,
    k: torch.Tensor,
    q_offset: int,
    scale: float,
    slopes: torch.Tensor | None = None,
    window: int | None = None,
    signed: bool = False,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(a, sign, visible): fp32 logits (B, Hq, T, S) with -inf on hidden keys, the
    sign of z for the signed form (else None), and the bool mask (T, S)."""
    z = softcap_logits(dense_dots(q, k) * scale, softcap)
    sign = None
    if signed:
        sign, z = torch.sign(z), z.abs()
    if slopes is not None:
        z = z + alibi_bias(slopes.to(z.device), q.shape[2], k.shape[2], q_offset)
    visible = causal_mask(q.shape[2], k.shape[2], q_offset, q.device, window)
    return z.masked_fill(~visible, float("-inf")), sign, visible


def softmax_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_offset: int,
    scale: float | None = None,
    window: int | None = None,
    slopes: torch.Tensor | None = None,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense softmax attention (Vaswani et al. 2017), `softmax_j(a_ij) v` with the
    logits a of `dense_logits`; returns (out (B, Hq, T, Dv), weights (B, Hq, T, S))."""
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    a, _, _ = dense_logits(q, k, q_offset, scale, slopes, window, softcap=softcap)
    w = torch.softmax(a, dim=-1).nan_to_num(0.0)
    return (w @ expand_kv(v, q.shape[1]).float()).to(q.dtype), w
