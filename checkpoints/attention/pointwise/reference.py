"""Dense references of the pointwise variants: the spec and the oracle,
returning the weights (B, Hq, T, S) fp32.

- ReLA (Zhang, Titov, Sennrich 2021): `w_ij = ReLU(q_i . k_j / sqrt(d))`;
- tra (Huang et al. 2026): `w_ij = ReLU(s_ij - tau_i)^p` with
  `s_ij = qn_i . kn_j / d` on RMS-normalised q and k and
  `tau_i = beta_h * sqrt(2 ln(i + 1) / d)` at the absolute position i;
- tda: `w = w_tra(q1, k1) - lam * w_tra(q2, k2)`.

See rela.py and threshold.py for the layers (norms, parameters, caching).
Shapes: q (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, Dv); query t at
absolute position q_offset + t."""

from __future__ import annotations

import math

import torch

from checkpoints.attention.gqa import dense_dots, expand_kv
from checkpoints.attention.masks import causal_mask


def rela_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense ReLA weights and per-head output (before the gated norm)."""
    w = torch.relu(dense_dots(q, k) / math.sqrt(q.shape[-1]))
    w = w * causal_mask(q.shape[2], k.shape[2], q_offset, q.device)
    return (w @ expand_kv(v, q.shape[1]).float()).to(q.dtype), w


def threshold_tau(positions: torch.Tensor, beta: torch.Tensor, d: int) -> torch.Tensor:
    """(Hq, n) fp32: `tau = beta_h * sqrt(2 ln(i + 1) / d)` at absolute positions i."""
    pos = positions.to(torch.float32)
    return beta.float()[:, None] * torch.sqrt(2.0 * torch.log(pos + 1.0) / d)[None, :]


def threshold_weights(s: torch.Tensor, tau: torch.Tensor, p: float) -> torch.Tensor:
    """`ReLU(s - tau)^p` (p = 1 skips the power)."""
    r = torch.relu(s - tau)
    return r if p == 1.0 else r.pow(p)


def tra_reference(
    qn: torch.Tensor, kn: torch.Tensor, v: torch.Tensor, q_offset: int, beta: torch.Tensor, p: float = 2.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense TRA on normalised qn (B, Hq, T, D), kn (B, Hkv, S, D); beta (Hq,).
    Returns (out (B, Hq, T, Dv), weights (B, Hq, T, S) fp32)."""
    d = qn.shape[-1]
    s = dense_dots(qn, kn) / d
    tau = threshold_tau(torch.arange(q_offset, q_offset + qn.shape[2], device=qn.device), beta, d)
    visible = causal_mask(qn.shape[2], kn.shape[2], q_offset, qn.device)
    w = torch.where(visible, threshold_weights(s, tau[None, :, :, None], p), 0.0)
    return (w @ expand_kv(v, qn.shape[1]).float()).to(qn.dtype), w


def tda_reference(
    q1: torch.Tensor, k1: torch.Tensor, q2: torch.Tensor, k2: torch.Tensor, v: torch.Tensor, q_offset: int,
    beta: torch.Tensor, lam: float | torch.Tensor, p: float = 2.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense TDA: `w = TRA weights(q1, k1) - lam * TRA weights(q2, k2)`, `out = w v`."""
    _, w1 = tra_reference(q1, k1, v, q_offset, beta, p)
    _, w2 = tra_reference(q2, k2, v, q_offset, beta, p)
    w = w1 - lam * w2
    return (w @ expand_kv(v, q1.shape[1]).float()).to(q1.dtype), w
