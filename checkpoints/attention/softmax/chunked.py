"""Softmax-family attention in PyTorch, streaming over key blocks: the online
softmax (Milakov & Gimelshein 2018; FlashAttention's tiling) with memory
O(block^2 + T x D), its row statistics, and PyTorch's fused CPU SDPA kernel
for plain causal softmax (the model's hot path on CPU).

Shapes: q (B, Hq, T, D); k, v (B, Hkv, S, D) with Hq a multiple of Hkv
(grouped-query attention: the G query heads of one kv head form one matrix of
rows, so a tile of dot products is (B, Hkv, G, n, m)); query t sits at
absolute position `q_offset + t`. Logits as in `reference.py`; the final
weights of a row are `sign * exp(a - m) / l` with its max m and normaliser l.
Rows with no visible key output exactly zero."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from checkpoints.attention.gqa import dense_dots, expand_kv, group_rows
from checkpoints.attention.masks import causal_mask
from checkpoints.attention.softmax.reference import Logits, softcap_logits
from checkpoints.attention.stats import BlockedStats, RowStats

# (coef, q (B, Hq, T, D), k (B, Hkv, S, D)); coef a number or a 0-dim tensor (diff's lam, left on the
# device: only the statistics read it)
Term = tuple[float | torch.Tensor, torch.Tensor, torch.Tensor]
# One softmax: (q, k) -> (out (B, Hq, T, Dv), m, l (B, Hq, T)).
Softmax = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
# (coef, q, k, m, l) per term -> RowStats of their weighted sum.
TermStats = Callable[[list[tuple[float, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]], RowStats]


def _tile_logits(
    qb: torch.Tensor,
    kb: torch.Tensor,
    shape: tuple[int, ...],
    qpos: torch.Tensor,
    qlo: int,
    klo: int,
    slopes: torch.Tensor | None,
    window: int | None,
    signed: bool,
    softcap: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Logits of one (query block, key block) tile, (B, Hkv, G, n, m) fp32, with
    -inf on hidden keys; also the sign (signed form) and the visibility mask
    (None when every key of the tile is visible to every row). `qpos` (n,) are the
    queries' positions, `qlo` the first of them on the host (never read back)."""
    b, hkv, g, n = shape
    m = kb.shape[2]
    z = (qb @ kb.transpose(-1, -2)).view(b, hkv, g, n, m)
    if softcap is not None:  # `softcap_logits`, in place unless autograd needs z
        z = softcap_logits(z, softcap) if z.requires_grad else z.div_(softcap).tanh_().mul_(softcap)
    sign = None
    if signed:  # in place unless autograd needs z (training uses this path)
        sign = torch.sign(z)
        z = z.abs() if z.requires_grad else z.abs_()
    kpos = torch.arange(klo, klo + m, device=z.device)
    if slopes is not None:
        z += slopes.view(hkv, g, 1, 1) * (kpos[None, :] - qpos[:, None]).float()
    visible = None
    if klo + m - 1 > qlo or (window is not None and klo <= qlo + n - 1 - window):
        visible = kpos[None, :] <= qpos[:, None]
        if window is not None:
            visible &= kpos[None, :] > qpos[:, None] - window
        z.masked_fill_(~visible, float("-inf"))
    return z, sign, visible


# Tiles of about this many bytes of fp32 logits stay in a core's cache: the
# element-wise passes of the online softmax (softcap, mask, exp, ...) then run
# several times faster than over a block x block tile of every head.
TILE_BYTES = 2 << 20
MIN_TILE = 64


def cache_tile(rows_per_position: int, block: int) -> int:
    """The tile edge (a power of two <= block, >= MIN_TILE) whose logits for
    `rows_per_position` (batch x query heads) rows per position fit TILE_BYTES."""
    tile = MIN_TILE
    while tile * 2 <= block and rows_per_position * (tile * 2) ** 2 * 4 <= TILE_BYTES:
        tile *= 2
    return min(tile, block)


def _key_range(q_offset: int, lo: int, hi: int, s: int, window: int | None) -> tuple[int, int]:
    """Keys [start, end) any query of rows [lo, hi) can see."""
    end = min(s, q_offset + hi)
    start = 0 if window is None else max(0, q_offset + lo - window + 1)
    return start, end


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
    softcap: float | None = None,
    block: int = 1024,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Online softmax (Milakov & Gimelshein 2018; FlashAttention's tiling) in
    PyTorch: query blocks x key blocks, so memory is O(block^2 + T x D).

    q (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, Dv) -> out (B, Hq, T, Dv) in
    q's dtype, and the row max m and normaliser l (B, Hq, T) fp32 (natural log
    units) that define the final weights `sign * exp(a - m) / l`. `out`, when
    given, is the output buffer (tests pass one filled with NaN). `block` bounds
    the tile; the tile used is the cache-sized one at most that large (`cache_tile`)."""
    b, hq, t, _ = q.shape
    hkv, s, dv = k.shape[1], k.shape[2], v.shape[-1]
    g = hq // hkv
    block = cache_tile(b * hq, block)
    out = q.new_empty(b, hq, t, dv) if out is None else out
    m_all = q.new_empty(b, hq, t, dtype=torch.float32)
    l_all = q.new_empty(b, hq, t, dtype=torch.float32)
    slopes = slopes.to(q.device).float() if slopes is not None else None
    # Training runs this path too (cog, ALiBi): keep the graph intact when gradients are wanted.
    track = torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
    for lo in range(0, t, block):
        hi = min(t, lo + block)
        n = hi - lo
        qb = group_rows(q[:, :, lo:hi], hkv) * scale
        qpos = torch.arange(q_offset + lo, q_offset + hi, device=q.device)
        m = torch.full((b, hkv, g, n), float("-inf"), device=q.device)
        l = torch.zeros(b, hkv, g, n, device=q.device)
        acc = torch.zeros(b, hkv, g * n, dv, device=q.device)
        start, end = _key_range(q_offset, lo, hi, s, window)
        for klo in range(start, end, block):
            khi = min(end, klo + block)
            a, sign, _ = _tile_logits(qb, k[:, :, klo:khi].float(), (b, hkv, g, n), qpos, q_offset + lo, klo, slopes,
                                      window, signed, softcap)
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
    softcap: float | None = None,
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
    stats = BlockedStats(True, b, hq, t, q0.device, layer)
    for lo in range(0, t, block):
        hi = min(t, lo + block)
        n = hi - lo
        qpos = torch.arange(q_offset + lo, q_offset + hi, device=q0.device)
        stats.begin((b, hkv, g, n))
        grouped = [
            (coef, group_rows(q[:, :, lo:hi], hkv) * scale, k, m[:, :, lo:hi].reshape(b, hkv, g, n, 1),
             l[:, :, lo:hi].reshape(b, hkv, g, n, 1))
            for coef, q, k, m, l in terms
        ]
        start, end = _key_range(q_offset, lo, hi, s, window)
        for klo in range(start, end, block):
            khi = min(end, klo + block)
            w = None
            visible = None
            for coef, qb, k, m, l in grouped:
                a, sign, visible = _tile_logits(qb, k[:, :, klo:khi].float(), (b, hkv, g, n), qpos, q_offset + lo, klo,
                                                slopes,
                                                window, signed, softcap)
                p = (a - m.masked_fill(m == float("-inf"), 0.0)).exp_() / torch.where(l > 0, l, 1.0)
                if sign is not None:
                    p = p * sign
                w = coef * p if w is None else w + coef * p
            if visible is None:
                visible = torch.ones(1, dtype=torch.bool, device=q0.device)
            stats.update(w, visible, klo)
        # Keys outside [start, end) are hidden from every row: nothing to add.
        stats.end()
    return stats.result()


def softmax_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_offset: int, scale: float | None = None) -> torch.Tensor:
    """`scaled_dot_product_attention` with the bottom-right aligned causal mask
    (the comparison point in tests and benchmarks); rows with no key give 0."""
    gqa = q.shape[1] != k.shape[1]
    if q_offset == 0 and q.shape[2] == k.shape[2]:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=gqa)
    mask = causal_mask(q.shape[2], k.shape[2], q_offset, q.device)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa).nan_to_num(0.0)


# Up to this many queries after cached keys (a row of a verifying step: its last token and
# up to 16 drafted) one SDPA call with a (T, S) bool mask beats the prefix/diagonal split,
# whose flash calls need the keys expanded to every query head: 120-315 us against
# 263-496 us for 2-17 queries over 300 keys (GQA 8/4, one CPU thread); at 64 the split wins.
MASKED_QUERIES = 17


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
    if t <= MASKED_QUERIES:  # a verifying step's row: a (t, S) mask is small, and no GQA copy
        mask = causal_mask(t, s, q_offset, q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)
    k, v = expand_kv(k, q.shape[1]), expand_kv(v, q.shape[1])
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    o_prefix, lse_prefix = flash(q, k[:, :, :q_offset], v[:, :, :q_offset], 0.0, False, scale=scale)[:2]
    o_diag, lse_diag = flash(q, k[:, :, q_offset:], v[:, :, q_offset:], 0.0, True, scale=scale)[:2]
    # Weights exp(lse_p) / (exp(lse_p) + exp(lse_d)) = sigmoid(lse_p - lse_d): one fused lerp.
    w = torch.sigmoid(lse_prefix - lse_diag)[..., None]
    return torch.lerp(o_diag.float(), o_prefix.float(), w).to(q.dtype)


def ragged_decode_sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor, *, scale: float,
    slopes: torch.Tensor | None = None, window: int | None = None, softcap: float | None = None,
) -> torch.Tensor:
    """A decode step of rows of different lengths in one SDPA call: q (B, Hq, T, D) (T
    tokens per row: one, or a draft being verified), k/v (B, Hkv, S, D); row b's query i
    sits at `positions[b] + i` and sees the keys up to it. Keys past that (the row's later
    queries, another row's room) are masked. SDPA has no softcap: with one, the step's
    (B, Hq, T, S) logits are formed here."""
    kpos = torch.arange(k.shape[2], device=q.device)
    pos = positions.to(q.device)[:, None, None] + torch.arange(q.shape[2], device=q.device)[None, :, None]  # (B, T, 1)
    visible = kpos <= pos  # (B, T, S)
    if window is not None:
        visible &= kpos > pos - window
    if softcap is not None:
        a = softcap_logits(dense_dots(q, k) * scale, softcap)
        if slopes is not None:
            a = a + slopes.float().to(q.device)[None, :, None, None] * (kpos - pos).float()[:, None]
        w = torch.softmax(a.masked_fill(~visible[:, None], float("-inf")), dim=-1)
        return (w @ expand_kv(v, q.shape[1]).float()).to(q.dtype)
    mask = visible[:, None]  # (B, 1, T, S)
    if slopes is not None:  # ALiBi `slope_h * (j - i)` as a float mask with -inf on hidden keys
        bias = slopes.float().to(q.device)[None, :, None, None] * (kpos - pos).float()[:, None]
        mask = bias.masked_fill(~mask, float("-inf")).to(q.dtype)
    gqa = q.shape[1] != k.shape[1]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=gqa)


def fused_path_applies(q: torch.Tensor, q_offset: int, logits: Logits) -> bool:
    """Whether `softmax_sdpa_streaming` computes this softmax (CPU, no bias,
    window, sign or softcap)."""
    return (not logits.signed and logits.slopes is None and logits.window is None and logits.softcap is None
            and q.device.type == "cpu" and q_offset >= 0 and q.dtype in (torch.float32, torch.bfloat16))


def run_terms(terms: list[Term], softmax: Softmax, term_stats: TermStats,
              collect_stats: bool) -> tuple[list[torch.Tensor], RowStats | None]:
    """One softmax per term and, when asked, the statistics of `sum coef * p`
    from their (m, l): the loop the chunked and Triton paths share."""
    runs = [softmax(q, k) for _, q, k in terms]
    stats = None
    if collect_stats:
        stats = term_stats([(coef, q, k, m, l) for (coef, q, k), (_, m, l) in zip(terms, runs, strict=True)])
    return [out for out, _, _ in runs], stats


def family_attention(
    terms: list[Term], v: torch.Tensor, q_offset: int, logits: Logits, *,
    block: int = 1024, collect_stats: bool = False, layer: int = 0,
) -> tuple[list[torch.Tensor], RowStats | None]:
    """The outputs (B, Hq, T, Dv) of one softmax per term (coef, q, k) over the
    shared v (B, Hkv, S, Dv) (one term for the one-softmax variants, two for
    diff), and, when asked, the RowStats of `w = sum_c coef_c * p_c`."""
    q0 = terms[0][1]
    if not collect_stats and fused_path_applies(q0, q_offset, logits):
        # Plain causal softmax with nothing to measure: the fused kernel is the fast path.
        # It wants v as wide as q (diff's v is 2d wide): run it on each slice of v.
        def sdpa(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
            parts = (v,) if v.shape[-1] == q.shape[-1] else v.split(q.shape[-1], -1)
            outs = [softmax_sdpa_streaming(q, k, part, q_offset, scale=logits.scale) for part in parts]
            return outs[0] if len(outs) == 1 else torch.cat(outs, -1)

        return [sdpa(q, k) for _, q, k in terms], None
    kw = dict(logits._asdict(), block=block)
    return run_terms(terms, lambda q, k: online_softmax_chunked(q, k, v, q_offset, **kw),
                     lambda st: family_stats_chunked(st, q_offset, v.shape[2], layer=layer, **kw), collect_stats)
