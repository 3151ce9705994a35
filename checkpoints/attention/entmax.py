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
from typing import Any, ClassVar

import torch
from torch import nn

from checkpoints.attention.base import RowStats, register
from checkpoints.attention.nonsoftmax import (
    NonSoftmaxLayer,
    cat_stats,
    dense_dots,
    empty_stats,
    group_rows,
    per_head,
)
from checkpoints.attention.position import alibi_bias, alibi_slopes
from checkpoints.attention.softmax import causal_mask, expand_kv
from checkpoints.attention.stats import StreamingStats
from checkpoints.errors import ConfigError

NEWTON_MAX_ITERS = 60
KEEP_SCORES_BYTES = 32 * 2**20  # streaming entmax keeps a query block's scores below this size
NEWTON_TOL = 1e-6  # relative step size (a few fp32 ulps) below which Newton has converged


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


def _power(y: torch.Tensor, r: float) -> torch.Tensor:
    return y if r == 1.0 else (y * y if r == 2.0 else y.pow(r))


def _dpower(y: torch.Tensor, r: float) -> torch.Tensor:
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
        slope = _dpower(torch.relu(xd - tau), r)
        slope = slope / slope.sum(-1, keepdim=True).clamp_min(1e-300)
    if x.requires_grad:
        tau = tau + (slope * torch.where(visible, x - xd, 0.0)).sum(-1, keepdim=True)
    w = torch.relu(x - tau).pow(r).float()
    return (w @ expand_kv(v, q.shape[1]).float()).to(q.dtype), w


def entmax_chunked(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int, alpha: float = 1.5, *,
    as_beta: torch.Tensor | None = None, as_gamma: torch.Tensor | None = None, block: int = 1024,
    collect_stats: bool = False, layer: int = 0, out: torch.Tensor | None = None,
    slopes: torch.Tensor | None = None,
) -> tuple[torch.Tensor, RowStats | None]:
    """Entmax attention streamed over key blocks: a max pass, Newton passes for
    tau (see the module docstring), then one output pass."""
    alpha = check_alpha(alpha)
    r = 1.0 / (alpha - 1.0)
    q = scale_queries(q, q_offset, as_beta, as_gamma)
    b, hq, t, d = q.shape
    hkv, s, dv = k.shape[1], k.shape[2], v.shape[-1]
    g = hq // hkv
    out = q.new_empty(b, hq, t, dv) if out is None else out
    # ALiBi in x units: (alpha - 1) slope_h, viewed (Hkv, G, 1, 1) to broadcast over tiles.
    bias = None if slopes is None else per_head(slopes.to(q.device), hkv) * (alpha - 1.0)
    parts: list[RowStats] = []
    for lo in range(0, t, block):
        hi = min(t, lo + block)
        n = hi - lo
        qb = group_rows(q[:, :, lo:hi], hkv) * ((alpha - 1.0) / math.sqrt(d))
        qpos = torch.arange(q_offset + lo, q_offset + hi, device=q.device)
        end = min(s, q_offset + hi)
        ranges = [(klo, min(end, klo + block)) for klo in range(0, end, block)]

        # Small rows (decode, short prompts): keep the scores for the Newton passes
        # instead of recomputing them; the budget keeps memory O(block x N) and small.
        kept: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = (
            {} if b * hq * n * end * 4 <= KEEP_SCORES_BYTES else None)

        def tile(klo: int, khi: int, qb=qb, n=n, qpos=qpos, kept=kept) -> tuple[torch.Tensor, torch.Tensor]:
            if kept is not None and klo in kept:
                return kept[klo]
            x = (qb @ k[:, :, klo:khi].float().transpose(-1, -2)).view(b, hkv, g, n, -1)
            kpos = torch.arange(klo, khi, device=q.device)
            if bias is not None:
                x = x + bias * (kpos[None, :] - qpos[:, None]).float()
            res = x, kpos[None, :] <= qpos[:, None]
            if kept is not None:
                kept[klo] = res
            return res

        top = torch.full((b, hkv, g, n), float("-inf"), device=q.device)
        for klo, khi in ranges:
            x, visible = tile(klo, khi)
            top = torch.maximum(top, x.masked_fill(~visible, float("-inf")).amax(-1))
        seen = torch.clamp(qpos + 1, max=s).float()  # visible keys per row
        floor = torch.where(top > float("-inf"), top - 1.0, 0.0)
        tau = torch.where(top > float("-inf"), top - seen ** (1.0 - alpha), 0.0)
        for it in range(NEWTON_MAX_ITERS):
            f = torch.full_like(tau, -1.0)
            fp = torch.zeros_like(tau)
            for klo, khi in ranges:
                x, visible = tile(klo, khi)
                y = torch.where(visible, torch.relu(x - tau[..., None]), 0.0)
                f += _power(y, r).sum(-1)
                fp += _dpower(y, r).sum(-1)
            step = torch.where(fp > 0, f / (r * fp.clamp_min(1e-30)), 0.0)
            tau = torch.maximum(tau + step, floor)
            # After the first (leftward) step the iterates only rise; a step that is
            # not clearly positive is rounding noise: the row has converged.
            if it > 0 and not (step > NEWTON_TOL * tau.abs().clamp_min(1.0)).any():
                break
        acc = torch.zeros(b, hkv, g * n, dv, device=q.device)
        st = StreamingStats((b, hkv, g, n), q.device) if collect_stats else None
        for klo, khi in ranges:
            x, visible = tile(klo, khi)
            w = _power(torch.where(visible, torch.relu(x - tau[..., None]), 0.0), r)
            acc += w.view(b, hkv, g * n, -1) @ v[:, :, klo:khi].float()
            if st is not None:
                st.update(w, visible, klo)
        out[:, :, lo:hi] = acc.view(b, hq, n, dv).to(out.dtype)
        if st is not None:
            parts.append(st.finish(layer))
    if not collect_stats:
        return out, None
    return out, (cat_stats(parts, b, hq, layer) if parts else empty_stats(b, hq, 0, q.device, layer))


@register
class EntmaxAttention(NonSoftmaxLayer):
    """alpha-entmax in place of softmax; `length_scaling` adds ASEntmax's
    per-head query scaling with learnable `as_beta`, `as_gamma`; ALiBi/NAPE
    positions as in the ASEntmax paper."""

    supports_positions = ("rope", "nope", "alibi", "nape")
    variant = "entmax"
    defaults: ClassVar[dict[str, Any]] = {"alpha": 1.5, "length_scaling": False, "as_beta": 0.0, "as_gamma": 1.0}

    def build_projections(self) -> None:
        super().build_projections()
        self.alpha = check_alpha(self.params["alpha"])
        if self.params["length_scaling"]:
            self.as_beta = nn.Parameter(torch.full((self.num_heads,), float(self.params["as_beta"])))
            self.as_gamma = nn.Parameter(torch.full((self.num_heads,), float(self.params["as_gamma"])))

    def slopes(self, device: torch.device) -> torch.Tensor | None:
        """Per-query-head ALiBi slopes (Hq,) for position alibi/nape, else None."""
        slopes = alibi_slopes(self.num_heads, self.position)
        return None if slopes is None else slopes.to(device)

    def _scaling(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        if not self.params["length_scaling"]:
            return None, None
        return self.as_beta, self.as_gamma

    def reference(self, q_offset, q, k, v):
        beta, gamma = self._scaling()
        return entmax_reference(q, k, v, q_offset, self.alpha, beta, gamma, slopes=self.slopes(q.device))

    def chunked(self, q_offset, block, collect_stats, q, k, v):
        beta, gamma = self._scaling()
        return entmax_chunked(q, k, v, q_offset, self.alpha, as_beta=beta, as_gamma=gamma, block=block,
                              collect_stats=collect_stats, layer=self.layer, slopes=self.slopes(q.device))

    def triton(self, q_offset, collect_stats, q, k, v):
        from checkpoints.attention import triton_entmax

        beta, gamma = self._scaling()
        q = scale_queries(q, q_offset, beta.detach() if beta is not None else None,
                          gamma.detach() if gamma is not None else None)
        return triton_entmax.entmax_attention(q, k, v, q_offset, self.alpha, slopes=self.slopes(q.device),
                                              collect_stats=collect_stats, layer=self.layer)
