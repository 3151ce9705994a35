"""Standard softmax attention (Vaswani et al. 2017), as in Llama, Mistral, Qwen2,
and the machinery every online-softmax variant shares (ssmax, gated, cog,
intg, diff): masks, ALiBi bias, the streaming PyTorch path and the dispatch
between the three implementations.

Shapes: q (B, Hq, T, D); k, v (B, Hkv, S, D) with Hq a multiple of Hkv
(grouped-query attention); query t sits at absolute position `q_offset + t`
and sees keys j <= q_offset + t (and, with a sliding window W, j > q_offset + t - W).

A softmax-family row is described by its logits
`a_ij = z_ij + bias_ij` (z = scale * q.k, bias = ALiBi `slope_h * (j - i)`),
or for the signed (cog) form `a_ij = |z_ij| + bias_ij` with weights
`sign(z_ij) * softmax_j(a_ij)`. Rows with no visible key output exactly zero."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from checkpoints.attention.base import AttentionContext, AttentionLayer, RowStats, register
from checkpoints.attention.position import alibi_bias, alibi_slopes
from checkpoints.attention.stats import StreamingStats, stats_from_weights


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


def expand_kv(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, Hkv, S, D) -> (B, Hq, S, D) by repeating each kv head for its query group."""
    groups = num_heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def dense_logits(
    q: torch.Tensor,
    k: torch.Tensor,
    q_offset: int,
    scale: float,
    slopes: torch.Tensor | None = None,
    window: int | None = None,
    signed: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(a, sign, visible): fp32 logits (B, Hq, T, S) with -inf on hidden keys, the
    sign of z for the signed form (else None), and the bool mask (T, S)."""
    k = expand_kv(k, q.shape[1])
    z = (q.float() @ k.float().transpose(-1, -2)) * scale
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
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense softmax attention, `softmax_j(q.k * scale + bias) v`; returns
    (out (B, Hq, T, Dv), weights (B, Hq, T, S)). Rows with no visible key give
    zero output and zero weights."""
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    a, _, _ = dense_logits(q, k, q_offset, scale, slopes, window)
    w = torch.softmax(a, dim=-1).nan_to_num(0.0)
    return (w @ expand_kv(v, q.shape[1]).float()).to(q.dtype), w


# --- the streaming PyTorch path ----------------------------------------------


def _tile_logits(
    qb: torch.Tensor,
    kb: torch.Tensor,
    shape: tuple[int, ...],
    qpos: torch.Tensor,
    klo: int,
    slopes: torch.Tensor | None,
    window: int | None,
    signed: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Logits of one (query block, key block) tile, (B, Hkv, G, n, m) fp32, with
    -inf on hidden keys; also the sign (signed form) and the visibility mask
    (None when every key of the tile is visible to every row)."""
    b, hkv, g, n = shape
    m = kb.shape[2]
    z = (qb @ kb.transpose(-1, -2)).view(b, hkv, g, n, m)
    sign = None
    if signed:  # in place unless autograd needs z (training uses this path)
        sign = torch.sign(z)
        z = z.abs() if z.requires_grad else z.abs_()
    kpos = torch.arange(klo, klo + m, device=z.device)
    if slopes is not None:
        z += slopes.view(hkv, g, 1, 1) * (kpos[None, :] - qpos[:, None]).float()
    visible = None
    if klo + m - 1 > int(qpos[0]) or (window is not None and klo <= int(qpos[-1]) - window):
        visible = kpos[None, :] <= qpos[:, None]
        if window is not None:
            visible &= kpos[None, :] > qpos[:, None] - window
        z.masked_fill_(~visible, float("-inf"))
    return z, sign, visible


def _key_range(q_offset: int, lo: int, hi: int, s: int, window: int | None) -> tuple[int, int]:
    """Keys [start, end) any query of rows [lo, hi) can see."""
    end = min(s, q_offset + hi)
    start = 0 if window is None else max(0, q_offset + lo - window + 1)
    return start, end


def _group(x: torch.Tensor, hkv: int) -> torch.Tensor:
    """(B, Hq, n, D) -> (B, Hkv, G*n, D) fp32: each kv head's query group as one matrix."""
    b, hq, n, d = x.shape
    return x.float().reshape(b, hkv, hq // hkv * n, d)


def online_softmax_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_offset: int,
    *,
    scale: float,
    slopes: torch.Tensor | None = None,
    window: int | None = None,
    signed: bool = False,
    block: int = 1024,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Online softmax (Milakov & Gimelshein 2018; FlashAttention's tiling) in
    PyTorch: query blocks x key blocks, so memory is O(block^2 + T x D).

    q (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, Dv) -> out (B, Hq, T, Dv) in
    q's dtype, and the row max m and normaliser l (B, Hq, T) fp32 (natural log
    units) that define the final weights `sign * exp(a - m) / l`. `out`, when
    given, is the output buffer (tests pass one filled with NaN)."""
    b, hq, t, _ = q.shape
    hkv, s, dv = k.shape[1], k.shape[2], v.shape[-1]
    g = hq // hkv
    out = q.new_empty(b, hq, t, dv) if out is None else out
    m_all = q.new_empty(b, hq, t, dtype=torch.float32)
    l_all = q.new_empty(b, hq, t, dtype=torch.float32)
    slopes = slopes.to(q.device).float() if slopes is not None else None
    # Training runs this path too (cog, ALiBi): keep the graph intact when gradients are wanted.
    track = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    for lo in range(0, t, block):
        hi = min(t, lo + block)
        n = hi - lo
        qb = _group(q[:, :, lo:hi], hkv) * scale
        qpos = torch.arange(q_offset + lo, q_offset + hi, device=q.device)
        m = torch.full((b, hkv, g, n), float("-inf"), device=q.device)
        l = torch.zeros(b, hkv, g, n, device=q.device)
        acc = torch.zeros(b, hkv, g * n, dv, device=q.device)
        start, end = _key_range(q_offset, lo, hi, s, window)
        for klo in range(start, end, block):
            khi = min(end, klo + block)
            a, sign, _ = _tile_logits(qb, k[:, :, klo:khi].float(), (b, hkv, g, n), qpos, klo, slopes, window, signed)
            m_new = torch.maximum(m, a.amax(-1))
            m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0)
            alpha = torch.exp(m - m_safe)
            if track:  # out of place: autograd keeps what the in-place form overwrites
                p = torch.exp(a - m_safe[..., None])
                l = l * alpha + p.sum(-1)
                p = p if sign is None else p * sign
                acc = acc * alpha.view(b, hkv, g * n, 1) + p.view(b, hkv, g * n, -1) @ v[:, :, klo:khi].float()
            else:
                p = a.sub_(m_safe[..., None]).exp_()
                l = l * alpha + p.sum(-1)
                if sign is not None:
                    p.mul_(sign)
                acc.mul_(alpha.view(b, hkv, g * n, 1))
                acc.add_(p.view(b, hkv, g * n, -1) @ v[:, :, klo:khi].float())
            m = m_new
        l_safe = torch.where(l > 0, l, 1.0).view(b, hkv, g * n, 1)
        out[:, :, lo:hi] = (acc / l_safe).view(b, hq, n, dv).to(out.dtype)
        m_all[:, :, lo:hi] = m.view(b, hq, n)
        l_all[:, :, lo:hi] = l.view(b, hq, n)
    return out, m_all, l_all


def family_stats_chunked(
    terms: list[tuple[float, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]],
    q_offset: int,
    s: int,
    *,
    scale: float,
    slopes: torch.Tensor | None = None,
    window: int | None = None,
    signed: bool = False,
    block: int = 1024,
    layer: int = 0,
) -> RowStats:
    """`RowStats` of weights `w = sum_c coef_c * sign_c * exp(a_c - m_c) / l_c`
    (one term for softmax-like variants, two for diff), from the final (m, l)
    of `online_softmax_chunked`, streamed over the same tiles.

    terms: (coef, q (B, Hq, T, D), k (B, Hkv, S, D), m, l (B, Hq, T))."""
    q0 = terms[0][1]
    b, hq, t, _ = q0.shape
    hkv = terms[0][2].shape[1]
    g = hq // hkv
    slopes = slopes.to(q0.device).float() if slopes is not None else None
    parts = []
    for lo in range(0, t, block):
        hi = min(t, lo + block)
        n = hi - lo
        qpos = torch.arange(q_offset + lo, q_offset + hi, device=q0.device)
        acc = StreamingStats((b, hkv, g, n), q0.device)
        grouped = [
            (coef, _group(q[:, :, lo:hi], hkv) * scale, k, m[:, :, lo:hi].reshape(b, hkv, g, n, 1),
             l[:, :, lo:hi].reshape(b, hkv, g, n, 1))
            for coef, q, k, m, l in terms
        ]
        start, end = _key_range(q_offset, lo, hi, s, window)
        for klo in range(start, end, block):
            khi = min(end, klo + block)
            w = None
            visible = None
            for coef, qb, k, m, l in grouped:
                a, sign, visible = _tile_logits(qb, k[:, :, klo:khi].float(), (b, hkv, g, n), qpos, klo, slopes, window, signed)
                p = (a - m.masked_fill(m == float("-inf"), 0.0)).exp_() / torch.where(l > 0, l, 1.0)
                if sign is not None:
                    p = p * sign
                w = coef * p if w is None else w + coef * p
            if visible is None:
                visible = torch.ones(1, dtype=torch.bool, device=q0.device)
            acc.update(w, visible, klo)
        # Keys outside [start, end) are hidden from every row: nothing to add.
        parts.append(acc.finish(layer))
    cat = lambda name: torch.cat([getattr(p, name).reshape(b, hq, -1) for p in parts], dim=2)  # noqa: E731
    return RowStats(layer=layer, abs_sum=cat("abs_sum"), zeros=cat("zeros"), first=cat("first"),
                    entropy=cat("entropy"), visible=cat("visible"))


def softmax_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_offset: int,
    scale: float | None = None,
    window: int | None = None,
    block: int = 1024,
    slopes: torch.Tensor | None = None,
) -> torch.Tensor:
    """Softmax attention streamed over key blocks (see `online_softmax_chunked`)."""
    scale = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    return online_softmax_chunked(q, k, v, q_offset, scale=scale, slopes=slopes, window=window, block=block)[0]


def softmax_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int, scale: float | None = None) -> torch.Tensor:
    """`scaled_dot_product_attention` with the bottom-right aligned causal mask
    (the comparison point in tests and benchmarks); rows with no key give 0."""
    gqa = q.shape[1] != k.shape[1]
    if q_offset == 0 and q.shape[2] == k.shape[2]:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
    mask = causal_mask(q.shape[2], k.shape[2], q_offset, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa).nan_to_num(0.0)


def softmax_sdpa_streaming(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int, scale: float | None = None
) -> torch.Tensor:
    """Plain causal softmax through PyTorch's fused CPU flash kernel, for the
    model's hot path: the keys a query block sees split into a fully visible
    prefix (no mask) and a causal square (`is_causal`), merged by their
    log-sum-exp. No mask tensor and no score matrix are ever built, so memory
    stays O(T x D) and a 32k prefill runs at SDPA speed."""
    t, s = q.shape[2], k.shape[2]
    gqa = q.shape[1] != k.shape[1]
    if q_offset == 0 and t == s:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
    if t == 1:  # decode: the one query sees every cached key
        return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=gqa)
    k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    o_prefix, lse_prefix = flash(q, k[:, :, :q_offset], v[:, :, :q_offset], 0.0, False, scale=scale)[:2]
    o_diag, lse_diag = flash(q, k[:, :, q_offset:], v[:, :, q_offset:], 0.0, True, scale=scale)[:2]
    # Weights exp(lse_p) / (exp(lse_p) + exp(lse_d)) = sigmoid(lse_p - lse_d): one fused lerp.
    w = torch.sigmoid(lse_prefix - lse_diag)[..., None]
    return torch.lerp(o_diag.float(), o_prefix.float(), w).to(q.dtype)


def ragged_decode_sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor, *, scale: float,
    slopes: torch.Tensor | None = None, window: int | None = None,
) -> torch.Tensor:
    """One decode step of rows of different lengths in one SDPA call: q (B, Hq, 1, D),
    k/v (B, Hkv, S, D) where row b's keys are its first `positions[b] + 1`; its query
    sits at `positions[b]`. Keys past a row's length (another row's room) are masked."""
    kpos = torch.arange(k.shape[2], device=q.device)
    pos = positions.to(q.device)[:, None]
    visible = kpos[None, :] <= pos  # (B, S)
    if window is not None:
        visible &= kpos[None, :] > pos - window
    mask = visible[:, None, None, :]  # (B, 1, 1, S)
    if slopes is not None:  # ALiBi `slope_h * (j - i)` as a float mask with -inf on hidden keys
        bias = slopes.float().to(q.device)[None, :, None, None] * (kpos[None, :] - pos).float()[:, None, None, :]
        mask = bias.masked_fill(~mask, float("-inf")).to(q.dtype)
    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)


# --- dispatch between the three implementations --------------------------------


def fused_path_applies(q: torch.Tensor, q_offset: int, slopes: torch.Tensor | None, window: int | None,
                       signed: bool) -> bool:
    """Whether `softmax_sdpa_streaming` computes this softmax (CPU, no bias,
    window or sign)."""
    return (not signed and slopes is None and window is None and q.device.type == "cpu"
            and q_offset >= 0 and q.dtype in (torch.float32, torch.bfloat16))



def family_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_offset: int,
    ctx: AttentionContext,
    layer: int,
    *,
    scale: float,
    slopes: torch.Tensor | None,
    window: int | None,
    signed: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """The streaming paths (`torch` or `triton`) of a one-softmax variant;
    appends RowStats to ctx when asked. Returns (out, m, l); m and l are None
    on the fused SDPA fast path."""
    if ctx.backend == "triton":
        from checkpoints.attention import triton_softmax_family as tk

        out, m, l = tk.attention(q, k, v, q_offset, scale=scale, slopes=slopes, window=window, signed=signed)
        if ctx.collect_stats:
            ctx.stats.append(tk.row_stats([(1.0, q, k, m, l)], q_offset, scale=scale, slopes=slopes,
                                          window=window, signed=signed, layer=layer))
        return out, m, l
    if not ctx.collect_stats and fused_path_applies(q, q_offset, slopes, window, signed):
        # Plain causal softmax with nothing to measure: the fused kernel is the fast path.
        return softmax_sdpa_streaming(q, k, v, q_offset, scale=scale), None, None
    out, m, l = online_softmax_chunked(q, k, v, q_offset, scale=scale, slopes=slopes, window=window,
                                       signed=signed, block=ctx.block_size)
    if ctx.collect_stats:
        ctx.stats.append(family_stats_chunked([(1.0, q, k, m, l)], q_offset, k.shape[2], scale=scale,
                                              slopes=slopes, window=window, signed=signed,
                                              block=ctx.block_size, layer=layer))
    return out, m, l


class SoftmaxFamilyLayer(AttentionLayer):
    """Shared `core` of the one-softmax variants. A subclass sets `signed`,
    overrides `logit_scale`, `scale_queries` (per-row factors folded into q),
    `reference` (the paper's dense formula) and `finish` (output gating)."""

    signed: ClassVar[bool] = False

    def alibi(self, device: torch.device) -> torch.Tensor | None:
        """Per-query-head ALiBi slopes for position alibi/nape, else None."""
        slopes = alibi_slopes(self.num_heads, self.position)
        return slopes.to(device) if slopes is not None else None

    def logit_scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim)

    def scale_queries(self, q: torch.Tensor, q_offset: int) -> torch.Tensor:
        return q

    def reference(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int,
        slopes: torch.Tensor | None, window: int | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return softmax_reference(q, k, v, q_offset, self.logit_scale(), window, slopes)

    def finish(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return out

    def by_rows(self, ctx: AttentionContext, run, queries: dict[str, torch.Tensor],
                keys: dict[str, torch.Tensor]) -> torch.Tensor:
        """A ragged decode step of a plain (unsigned, unscaled-query) softmax runs as one
        masked SDPA call over the whole batch; anything else goes row by row."""
        plain = (type(self).core is SoftmaxFamilyLayer.core and not self.signed
                 and type(self).scale_queries is SoftmaxFamilyLayer.scale_queries)
        if (ctx.row_positions is None or not plain or ctx.backend != "torch"
                or ctx.collect_stats or ctx.return_weights):
            return super().by_rows(ctx, run, queries, keys)
        q, x, k, v = queries["q"], queries["x"], keys["k"], keys["v"]
        out = ragged_decode_sdpa(q, k, v, ctx.row_positions, scale=self.logit_scale(),
                                 slopes=self.alibi(q.device), window=self.config.sliding_window)
        return self.finish(out, x)

    def core(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ctx: AttentionContext, x: torch.Tensor
    ) -> torch.Tensor:
        window = self.config.sliding_window
        q_offset = k.shape[2] - q.shape[2]
        slopes = self.alibi(q.device)
        if ctx.backend == "reference" or ctx.return_weights:
            out, w = self.reference(q, k, v, q_offset, slopes, window)
            if ctx.return_weights:
                ctx.weights.append(w)
            if ctx.collect_stats:
                visible = causal_mask(q.shape[2], k.shape[2], q_offset, q.device, window)
                ctx.stats.append(stats_from_weights(w, visible, self.layer))
        else:
            out, _, _ = family_attention(
                self.scale_queries(q, q_offset), k, v, q_offset, ctx, self.layer,
                scale=self.logit_scale(), slopes=slopes, window=window, signed=self.signed,
            )
        return self.finish(out, x)


@register
class SoftmaxAttention(SoftmaxFamilyLayer):
    """softmax_j(q.k / sqrt(d)) v (Vaswani et al. 2017)."""

    variant = "softmax"
    defaults: ClassVar[dict[str, Any]] = {}
