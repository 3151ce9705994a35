"""alpha-entmax attention (Peters, Niculae, Martins 2019, "Sparse Sequence-to-
Sequence Models"; Correia et al. 2019, "Adaptively Sparse Transformers";
streaming form after AdaSplash, Goncalves et al. 2025):

    w_ij = [(alpha - 1) z_ij - tau_i]_+^{1/(alpha-1)},   z = q.k / sqrt(d),

with tau_i the unique threshold that makes row i sum to one. alpha is in
(1, 2]: 1.5 is the default (entmax15), 2 is sparsemax, alpha -> 1 tends to
softmax. Optional ASEntmax length scaling (Vasylenko et al. 2025, "Long-
Context Generalization with Sparse Attention") multiplies the scores of
query i by `1 + beta_h * (log(i + 2))^gamma_h` (per-head parameters
`as_beta`, init 0 = no scaling, and `as_gamma`, init 1). That paper pairs
ASEntmax with NAPE (half the heads NoPE, half ALiBi), so entmax, alone among
the non-softmax variants, accepts `position: alibi | nape`: the ALiBi bias
`slope_h (j - i)` is added to z (after the length scaling of q).

Finding tau. With x = (alpha - 1) z and r = 1/(alpha - 1) >= 1, the function
f(tau) = sum_j [x_j - tau]_+^r - 1 is decreasing and convex, f(max x - 1) >= 0
and f(max x - n^{1-alpha}) <= 0.
- The reference bisects that bracket in float64 until it is exact (the
  `entmax_bisect` algorithm of Blondel et al. 2019).
- The streaming paths run Newton's method from the right end of the bracket:
  on a convex decreasing function the tangent lies below f, so the first step
  lands at or left of the root (clamped to the left end, max x - 1) and the
  iterates then increase monotonically to the root without overshooting; no
  bracketing is needed. Each iteration is one pass over the key blocks (f and
  f' accumulate block by block), and a last pass computes the output (and
  statistics) with the final tau."""

from __future__ import annotations

import math

import torch

from checkpoints.attention.gqa import dense_dots, expand_kv
from checkpoints.attention.masks import causal_mask
from checkpoints.attention.position import alibi_bias
from checkpoints.errors import ConfigError


def check_alpha(alpha: float) -> float:
    alpha = float(alpha)
    if not 1.0 < alpha <= 2.0:
        raise ConfigError(f"entmax alpha must be in (1, 2] (1.5 = entmax15, 2 = sparsemax), got {alpha}")
    return alpha


def length_scale(positions: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """(Hq, n) fp32 ASEntmax factors `1 + beta_h * log(i + 2)^gamma_h`."""
    log = torch.log(positions.float() + 2.0)
    return 1.0 + beta.float()[:, None] * log[None, :] ** gamma.float()[:, None]


def scale_queries(q: torch.Tensor, q_offset: int, beta: torch.Tensor | None, gamma: torch.Tensor | None) -> torch.Tensor:
    """q (B, Hq, T, D) times its row's ASEntmax factor (q unchanged without scaling)."""
    if beta is None:
        return q
    pos = torch.arange(q_offset, q_offset + q.shape[2], device=q.device)
    f = length_scale(pos, beta.to(q.device), gamma.to(q.device))
    return (q.float() * f[None, :, :, None]).to(q.dtype)


def pow_r(y: torch.Tensor, r: float) -> torch.Tensor:
    return y if r == 1.0 else (y * y if r == 2.0 else y.pow(r))


def dpow_r(y: torch.Tensor, r: float) -> torch.Tensor:
    """d/dy y^r / r = y^{r-1}, with 0^0 := 0 (keys outside the support)."""
    return (y > 0).to(y.dtype) if r == 1.0 else (y if r == 2.0 else y.pow(r - 1.0))


def entmax_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int, alpha: float = 1.5,
    as_beta: torch.Tensor | None = None, as_gamma: torch.Tensor | None = None, iters: int = 80,
    slopes: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense entmax attention: (out (B, Hq, T, Dv) in q's dtype, weights fp32);
    `slopes` (Hq,) adds the ALiBi bias `slope_h (j - i)` to z."""
    alpha = check_alpha(alpha)
    r = 1.0 / (alpha - 1.0)
    z = dense_dots(scale_queries(q, q_offset, as_beta, as_gamma), k) / math.sqrt(q.shape[-1])
    if slopes is not None:
        z = z + alibi_bias(slopes.to(z.device), q.shape[2], k.shape[2], q_offset)
    visible = causal_mask(q.shape[2], k.shape[2], q_offset, q.device)
    x = ((alpha - 1.0) * z.double()).masked_fill(~visible, float("-inf"))
    with torch.no_grad():
        xd = x.detach()
        n = visible.sum(-1, keepdim=True).double()
        top = xd.amax(-1, keepdim=True) if x.shape[-1] else x.new_zeros(*x.shape[:-1], 1)
        top = torch.where(n > 0, top, 0.0)
        lo, hi = top - 1.0, top - n.clamp_min(1.0) ** (1.0 - alpha)
        for _ in range(iters):  # bisection: f(lo) >= 0 >= f(hi)
            mid = (lo + hi) / 2
            f = torch.relu(xd - mid).pow(r).sum(-1, keepdim=True) - 1.0
            lo, hi = torch.where(f >= 0, mid, lo), torch.where(f >= 0, hi, mid)
        tau = (lo + hi) / 2
        # Implicit-function gradient of tau (the row sum stays 1):
        # d tau / d x_j = y_j^{r-1} / sum_k y_k^{r-1} with y = [x - tau]_+.
        slope = dpow_r(torch.relu(xd - tau), r)
        slope = slope / slope.sum(-1, keepdim=True).clamp_min(1e-300)
    if x.requires_grad:
        tau = tau + (slope * torch.where(visible, x - xd, 0.0)).sum(-1, keepdim=True)
    w = torch.relu(x - tau).pow(r).float()
    return (w @ expand_kv(v, q.shape[1]).float()).to(q.dtype), w
