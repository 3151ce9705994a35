"""The layer every variant extends, the context of one forward pass and the
one backend dispatch.

A variant subclasses `AttentionLayer`, sets `variant`, and overrides what
differs: its projections (`build_projections`), its positional treatment
(`rotate`), the output treatment (`finish`) and its three implementations on
a dict of named tensors (q, k, v and whatever else it caches):

- `reference(q_offset, **t) -> (out, weights (B, Hq, T, S))`: dense, the spec;
- `chunked(q_offset, block, collect_stats, **t) -> (out, RowStats | None)`:
  PyTorch, streaming over key blocks;
- `triton(q_offset, collect_stats, **t) -> (out, RowStats | None)`: fused
  kernels, imported only when this backend runs.

`attend` picks one of them from the context's (already resolved) backend and
records weights or statistics when asked; it is the only place that does."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch
from torch import nn

from checkpoints.attention.backend import Backend
from checkpoints.attention.masks import causal_mask
from checkpoints.attention.position import alibi_slopes
from checkpoints.attention.stats import RowStats, stats_from_weights
from checkpoints.config import POSITIONS, ModelConfig
from checkpoints.errors import ConfigError
from checkpoints.kv.cache import LayerCache
from checkpoints.norm import RMSNorm
from checkpoints.rope import Rotary, apply_rotary


@dataclass
class AttentionContext:
    """What every layer needs to know about the current forward pass.

    `start` is the number of tokens already in the cache: query t of this
    chunk sits at absolute position `start + t` (bottom-right aligned mask).
    `backend` is resolved (never `auto`)."""

    rotary: Rotary
    start: int
    backend: Backend
    local_rotary: Rotary | None = None  # the sliding layers' own RoPE (Gemma 3), if the model has one
    block_size: int = 1024
    collect_stats: bool = False
    return_weights: bool = False
    # Filled by layers when asked: per-layer statistics or dense weights (B, Hq, T, S).
    stats: list[RowStats] = field(default_factory=list)
    weights: list[torch.Tensor] = field(default_factory=list)
    # Ragged decode (rows of different lengths, t new tokens per row: one, or a draft being
    # verified): row b's query i sits at position `row_positions[b] + i` ((B,) the first)
    # and sees its first `row_positions[b] + i + 1` cached keys; `start` is unused then.
    # `host_row_positions` is the same on the host (the cache keeps both): nothing reads
    # the device copy back.
    row_positions: torch.Tensor | None = None
    host_row_positions: list[int] | None = None
    # The decoding batch's block table (B, W) when its rows live in the paged KV pool
    # (`checkpoints.kv`): a layer that `reads_pages` gets the pool's tensors
    # (blocks, block_size, H, D) as k and v and reads them through it; the others get gathered rows.
    pages: torch.Tensor | None = None

    # cos/sin of this pass's positions per (rotary, dim, dtype, device): every layer rotates q
    # and k at the same positions, so the tables are built once per pass, never compared.
    _rope: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.backend = Backend.parse(self.backend)
        if self.backend is Backend.AUTO:
            raise ValueError("AttentionContext takes a resolved backend: use Backend.resolve(device) on 'auto'")
        if self.row_positions is not None and self.host_row_positions is None:
            raise ValueError("a ragged decode step needs host_row_positions beside row_positions "
                             "(reading the device tensor back would synchronise every step)")

    def positions(self, length: int, device: torch.device) -> torch.Tensor:
        """Absolute positions of this chunk's queries: (T,), or (B, T) in a ragged decode step."""
        if self.row_positions is not None:
            first = self.row_positions.to(device)[:, None]
            return first if length == 1 else first + torch.arange(length, device=device)
        return torch.arange(self.start, self.start + length, device=device)

    def rope_tables(self, rotary: Rotary, length: int, dim: int, dtype: torch.dtype,
                    device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (T, dim) at this pass's positions ((B * T, dim) in a ragged decode step),
        built by the first layer that asks and shared by the rest."""
        key = (id(rotary), length, dim, dtype, device)
        if key not in self._rope:
            self._rope[key] = rotary.cos_sin(self.positions(length, device).reshape(-1), dim, dtype)
        return self._rope[key]

    def row_key_lengths(self, queries: int = 1) -> list[int]:
        """Keys each row of a ragged decode step of `queries` tokens per row holds (host ints)."""
        assert self.host_row_positions is not None, "a ragged decode step"
        return [n + queries for n in self.host_row_positions]


class AttentionLayer(nn.Module):
    """Llama attention: q/k/v/o projections, RoPE, GQA, a KV cache, and three
    implementations of the map from q, k, v to the per-head output."""

    variant: ClassVar[str] = ""
    # Default hyper-parameters of the variant; `params` from the config override them.
    defaults: ClassVar[dict[str, Any]] = {}
    # What the variant's implementations support.
    supports_positions: ClassVar[tuple[str, ...]] = POSITIONS
    supports_window: ClassVar[bool] = True
    # Attention logit softcapping and a q.k scale other than 1/sqrt(head_dim) (Gemma 2/3):
    # variants whose every path (reference, chunked, Triton) takes them.
    supports_logit_options: ClassVar[bool] = False
    # The family's RMSNorm of q and k (Qwen3, Gemma 3, OLMo 2) on the layer's q/k projections.
    supports_qk_norm: ClassVar[bool] = True
    # q/k heads of width head_dim per attention head (diff: 2, its q1/q2 and k1/k2).
    qk_heads_per_head: ClassVar[int] = 1

    def __init__(self, config: ModelConfig, layer: int, params: dict[str, Any]) -> None:
        super().__init__()
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            raise ConfigError(
                f"attention variant {self.variant!r} (layer {layer}) got unknown parameters {unknown}; "
                f"it accepts {sorted(self.defaults) or 'none'}"
            )
        self.config = config
        self.layer = layer
        self.params = {**self.defaults, **params}
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        self.position = config.attention.position_for(layer)
        self.window = config.window_for(layer)
        self.softcap = config.attn_logit_softcapping
        self.scale = config.logit_scale
        self.local_rope = config.uses_local_rope(layer)
        self._check_supported(config)
        self.build_projections()
        self.build_qk_norm()

    def _check_supported(self, config: ModelConfig) -> None:
        """Refuse, naming it, a feature of this layer the variant has no form of."""
        where = f"attention variant {self.variant!r} (layer {self.layer})"
        if self.position not in self.supports_positions:
            raise ConfigError(
                f"{where} supports position {' or '.join(self.supports_positions)}, "
                f"not {self.position!r} (ALiBi/NAPE are implemented for the softmax family and entmax)"
            )
        if not self.supports_window and self.window is not None:
            raise ConfigError(
                f"{where} has no sliding-window form and this layer is windowed (sliding_window "
                f"{self.window}); use it on a full-attention layer (layer_types) or use a softmax-family variant"
            )
        if not self.supports_logit_options:
            custom_scale = config.attention_scale is not None and abs(self.scale - self.head_dim ** -0.5) > 1e-12
            if self.softcap is not None or custom_scale:
                raise ConfigError(
                    f"{where} has no form with attention logit softcapping or a q.k scale other than "
                    f"1/sqrt(head_dim) (attn_logit_softcapping={self.softcap}, attention_scale="
                    f"{config.attention_scale}); use softmax or gated attention on this layer"
                )
        if config.qk_norm is not None and not self.supports_qk_norm:
            raise ConfigError(f"{where} normalises q and k itself; the family's qk_norm={config.qk_norm!r} "
                              "cannot be applied on top: use another variant on this layer")

    # --- pieces a variant may override ---------------------------------

    def build_projections(self) -> None:
        c, d = self.config, self.head_dim
        self.q_proj = nn.Linear(c.hidden_size, self.num_heads * d, bias=c.qkv_bias)
        self.k_proj = nn.Linear(c.hidden_size, self.num_kv_heads * d, bias=c.qkv_bias)
        self.v_proj = nn.Linear(c.hidden_size, self.num_kv_heads * d, bias=c.qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * d, c.hidden_size, bias=c.o_bias)

    def build_qk_norm(self) -> None:
        """`q_norm`/`k_norm`: per head over head_dim ("head") or over the whole
        projection ("projection"); none without `config.qk_norm`."""
        c = self.config
        if c.qk_norm is None:
            return
        q_dim, k_dim = (self.head_dim, self.head_dim) if c.qk_norm == "head" else (
            self.q_proj.out_features, self.k_proj.out_features)
        self.q_norm = RMSNorm(q_dim, c.rms_norm_eps, c.norm_unit_offset)
        self.k_norm = RMSNorm(k_dim, c.rms_norm_eps, c.norm_unit_offset)

    def queries_keys(self, x: torch.Tensor, ctx: AttentionContext) -> tuple[torch.Tensor, torch.Tensor]:
        """Projected, normalised (qk_norm) and rotated q (B, nHq, T, D) and k (B, nHkv, T, D)."""
        n = self.qk_heads_per_head
        q, k = self.q_proj(x), self.k_proj(x)
        if self.config.qk_norm == "projection":
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self.split_heads(q, n * self.num_heads), self.split_heads(k, n * self.num_kv_heads)
        if self.config.qk_norm == "head":
            q, k = self.q_norm(q), self.k_norm(k)
        return self.rotate(q, ctx), self.rotate(k, ctx)

    def split_heads(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, heads, -1).transpose(1, 2)  # (B, H, T, D)

    def rotate(self, x: torch.Tensor, ctx: AttentionContext, dim: int | None = None) -> torch.Tensor:
        """Apply RoPE to (B, H, T, D) at this chunk's absolute positions."""
        if self.position != "rope":
            return x
        dim = dim if dim is not None else self.config.rotary_dim
        rotary = ctx.local_rotary if self.local_rope else ctx.rotary
        cos, sin = ctx.rope_tables(rotary, x.shape[2], dim, x.dtype, x.device)
        if ctx.row_positions is not None:  # each row its own positions: (B * T, dim) -> (B, 1, T, dim)
            cos, sin = (c.view(x.shape[0], 1, x.shape[2], -1) for c in (cos, sin))
        return apply_rotary(x, cos, sin, rotary.interleaved)

    def alibi(self, device: torch.device) -> torch.Tensor | None:
        """Per-query-head ALiBi slopes (Hq,) for position alibi/nape, else None; copied to a
        device once (a host copy every step would synchronise, and a CUDA graph cannot hold it)."""
        on_device = self.__dict__.setdefault("_alibi_on", {})
        if device not in on_device:
            slopes = alibi_slopes(self.num_heads, self.position)
            on_device[device] = slopes.to(device) if slopes is not None else None
        return on_device[device]

    def reference(self, q_offset: int, **t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def chunked(self, q_offset: int, block: int, collect_stats: bool,
                **t: torch.Tensor) -> tuple[torch.Tensor, RowStats | None]:
        raise NotImplementedError

    def triton(self, q_offset: int, collect_stats: bool, **t: torch.Tensor) -> tuple[torch.Tensor, RowStats | None]:
        raise NotImplementedError

    def finish(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The per-head output (B, Hq, T, Dv) after the variant's output treatment
        (gates, norms), computed from the layer input x (B, T, hidden)."""
        return out

    # --- the one dispatch and the forward pass ----------------------------

    def attend(self, ctx: AttentionContext, **t: torch.Tensor) -> torch.Tensor:
        """Run the implementation of `ctx.backend` on the named tensors t (q
        (B, Hq, T, D), k (B, Hkv, S, D), v (B, Hkv, S, Dv), ...); append the dense
        weights and/or the row statistics to ctx when asked. Dense weights exist
        only on the reference path, so asking for them selects it."""
        if ctx.row_positions is not None:
            return self.attend_rows(ctx, **t)
        q, k = t["q"], t["k"]
        q_offset = k.shape[2] - q.shape[2]
        if ctx.backend is Backend.REFERENCE or ctx.return_weights:
            out, w = self.reference(q_offset, **t)
            if ctx.return_weights:
                ctx.weights.append(w)
            if ctx.collect_stats:
                visible = causal_mask(q.shape[2], k.shape[2], q_offset, q.device, self.window)
                ctx.stats.append(stats_from_weights(w, visible, self.layer))
            return out
        if ctx.backend is Backend.TRITON:
            out, st = self.triton(q_offset, ctx.collect_stats, **t)
        else:
            out, st = self.chunked(q_offset, ctx.block_size, ctx.collect_stats, **t)
        if st is not None:
            ctx.stats.append(st)
        return out

    def attend_rows(self, ctx: AttentionContext, **t: torch.Tensor) -> torch.Tensor:
        """A ragged decode step (t queries per row, rows of different lengths): the
        variant's one-call step when it has one (`ragged_step`), else `attend` row by
        row over each row's own keys (its queries the last t: a causal chunk), so no row
        sees another row's room in the cache and every position-dependent term (ssmax's
        log n, tra/tda's tau_i, ALiBi) uses the row's own positions. Tensors named q* are
        queries, the rest keys."""
        fast = self.ragged_step(ctx, **t)  # rows of the paged pool (`PagedRows`) too, when the variant can
        if fast is not None:
            return fast
        single = replace(ctx, row_positions=None, pages=None)
        outs = []
        for b, n in enumerate(ctx.row_key_lengths(t["q"].shape[2])):
            row = {name: x[b : b + 1] if name.startswith("q") else _row(x, b, n) for name, x in t.items()}
            outs.append(self.attend(single, **row))
        return torch.cat(outs, dim=0)

    def ragged_step(self, ctx: AttentionContext, **t: torch.Tensor) -> torch.Tensor | None:
        """The whole ragged decode step in one call, or None to run it row by row. Keys may
        be rows of the paged pool (`PagedRows`, not tensors: `row(b, n)` is row b's)."""
        return None

    def one_call_ragged_step(self, backend: Backend) -> bool:
        """Whether `ragged_step` runs the step in one call on `backend` (without statistics
        or weights): what lets a CUDA graph capture the decode step."""
        return False

    def reads_pages(self, ctx: AttentionContext, queries: int) -> bool:
        """Whether this ragged step of `queries` tokens per row reads the paged pool through
        `ctx.pages` (a kernel that takes the block table) instead of gathered rows."""
        return False

    def cached(self, ctx: AttentionContext, cache: LayerCache, queries: int, **entries: torch.Tensor) -> dict:
        """Write this step's entries (B, H, T, D) into `cache`; what attention then reads:
        the cache's entries (a sequence's, or a batch's rows gathered (B, H, width, D)); in a
        step of the paged decoding batch, the pool's tensors for a kernel that `reads_pages`,
        and on the PyTorch backends the rows one by one (`PagedRows`: views of the pool,
        attended row by row: nothing gathered)."""
        if ctx.pages is None:
            return cache.append(**entries)
        if self.reads_pages(ctx, queries):
            return cache.write(**entries)
        return cache.append(**entries) if ctx.backend is Backend.TRITON else cache.rows(**entries)

    def forward(self, x: torch.Tensor, ctx: AttentionContext, cache: LayerCache | None) -> torch.Tensor:
        """x: (B, T, hidden) -> (B, T, hidden)."""
        b, t, _ = x.shape
        q, k = self.queries_keys(x, ctx)
        v = self.split_heads(self.v_proj(x), self.num_kv_heads)
        if cache is not None:
            kv = self.cached(ctx, cache, t, k=k, v=v)
            k, v = kv["k"], kv["v"]
        out = self.finish(self.attend(ctx, q=q, k=k, v=v), x)  # (B, Hq, T, Dv)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


def _row(x: Any, b: int, n: int) -> torch.Tensor:
    """Row b's first n keys (1, H, n, D) of a batch's entry: a tensor's slice, or a paged row."""
    return x[b : b + 1, :, :n] if isinstance(x, torch.Tensor) else x.row(b, n)
