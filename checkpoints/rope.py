"""Rotary position embeddings and every scaling method in reference/rope.md.

Pure functions compute `(inv_freq, attention_factor)`; `Rotary` turns them
into cos/sin tables for a range of positions and applies them in either
layout. All scaling maths lives here and nowhere else."""

from __future__ import annotations

import math
from typing import Any

import torch

from checkpoints.config import ROPE_TYPES, ModelConfig, RopeScaling
from checkpoints.errors import ConfigError


def default_inv_freq(dim: int, base: float) -> torch.Tensor:
    """`base^(-2i/dim)` for i = 0 .. dim/2 - 1, in float64 for exactness."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim))


def ntk_base(base: float, factor: float, dim: int) -> float:
    """Static NTK-aware base: `base * s^(dim / (dim - 2))`."""
    return base * factor ** (dim / (dim - 2))


def dynamic_base(base: float, factor: float, dim: int, length: int, l0: int) -> float:
    """Dynamic NTK base for a sequence of `length` tokens; unchanged while length <= L0."""
    length = max(length, l0)
    return base * ((factor * length / l0) - (factor - 1)) ** (dim / (dim - 2))


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def yarn(dim: int, base: float, s: RopeScaling, l0: int) -> tuple[torch.Tensor, float]:
    """YaRN (Peng et al. 2023): ramp between interpolated and original frequencies."""
    factor = s.factor
    if s.attention_factor is not None:
        attn = float(s.attention_factor)
    elif s.mscale is not None and s.mscale_all_dim is not None:
        attn = _yarn_mscale(factor, s.mscale) / _yarn_mscale(factor, s.mscale_all_dim)
    else:
        attn = _yarn_mscale(factor)

    def corr_dim(rotations: float) -> float:
        return (dim * math.log(l0 / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = corr_dim(s.beta_fast), corr_dim(s.beta_slow)
    if s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # E_i: 1 keeps the original frequency
    inv = default_inv_freq(dim, base)
    return (inv / factor) * (1 - keep) + inv * keep, attn


def llama3(dim: int, base: float, s: RopeScaling, l0: int) -> torch.Tensor:
    """Llama 3.1 frequency-dependent interpolation."""
    inv = default_inv_freq(dim, base)
    low_wavelen = l0 / s.low_freq_factor
    high_wavelen = l0 / s.high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > low_wavelen, inv / s.factor, inv)
    smooth = (l0 / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(medium, smoothed, scaled)


def longrope(
    dim: int, base: float, s: RopeScaling, l0: int, max_pos: int, length: int
) -> tuple[torch.Tensor, float]:
    """LongRoPE (Phi-3): per-pair rescale factors, long ones beyond L0."""
    ext = s.long_factor if length > l0 else s.short_factor
    assert ext is not None  # validated in RopeScaling
    if len(ext) != dim // 2:
        raise ConfigError(f"longrope factors must have dim/2 = {dim // 2} entries, got {len(ext)}")
    ext_t = torch.tensor(ext, dtype=torch.float64)
    inv = 1.0 / (ext_t * base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim))
    if s.attention_factor is not None:
        attn = float(s.attention_factor)
    else:
        scale = s.factor if s.factor else max_pos / l0
        attn = 1.0 if scale <= 1.0 else math.sqrt(1 + math.log(scale) / math.log(l0))
    return inv, attn


def inv_freq_and_factor(
    scaling: RopeScaling, dim: int, base: float, l0: int, max_pos: int, length: int = 0
) -> tuple[torch.Tensor, float]:
    """(inv_freq in float64 of shape (dim/2,), attention factor) for a sequence of
    `length` tokens (only dynamic and longrope depend on it)."""
    kind = scaling.type
    if kind == "default":
        return default_inv_freq(dim, base), 1.0
    if kind == "linear":
        return default_inv_freq(dim, base) / scaling.factor, 1.0
    if kind == "ntk":
        return default_inv_freq(dim, ntk_base(base, scaling.factor, dim)), 1.0
    if kind == "dynamic":
        return default_inv_freq(dim, dynamic_base(base, scaling.factor, dim, length, l0)), 1.0
    if kind == "yarn":
        return yarn(dim, base, scaling, l0)
    if kind == "llama3":
        return llama3(dim, base, scaling, l0), 1.0
    if kind == "longrope":
        return longrope(dim, base, scaling, l0, max_pos, length)
    raise ConfigError(f"unknown rope type {kind!r}; supported rope types: {', '.join(ROPE_TYPES)}")


def parse_rope_override(value: str | dict[str, Any] | RopeScaling | None, config: ModelConfig) -> RopeScaling:
    """A job's RoPE override: `"yarn:4"`, `"ntk:8"`, `"none"`, or a dict in
    either transformers spelling. L0 defaults to the checkpoint's own."""
    if value is None:
        return config.rope_scaling
    if isinstance(value, RopeScaling):
        return value
    if isinstance(value, dict):
        raw = dict(value)
    elif isinstance(value, str):
        text = value.strip().lower()
        if text in ("", "none", "default", "checkpoint"):
            return RopeScaling() if text in ("none", "default") else config.rope_scaling
        kind, _, factor = text.partition(":")
        raw = {"rope_type": kind}
        if factor:
            try:
                raw["factor"] = float(factor)
            except ValueError as e:
                raise ConfigError(f"rope override {value!r}: factor {factor!r} is not a number") from e
        elif kind != "default":
            raise ConfigError(f"rope override {value!r} needs a factor, for example '{kind}:4'")
    else:
        raise ConfigError(f"rope override must be a string like 'yarn:4' or a dict, got {type(value).__name__}")
    kind = raw.get("rope_type") or raw.get("type")
    if kind not in ("dynamic", "default") and "original_max_position_embeddings" not in raw:
        raw["original_max_position_embeddings"] = config.rope_l0
    return RopeScaling.from_dict(raw)


class Rotary:
    """cos/sin tables for one model. Holds the scaling and, for dynamic NTK,
    the length the base was last computed for (set at prefill)."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.scaling = config.rope_scaling
        self.base = config.rope_theta
        self.l0 = config.rope_l0
        self.max_pos = config.max_position_embeddings
        self.interleaved = config.rotary_layout == "interleaved"
        self._length = 0  # the sequence length the current tables were built for
        self._cache: dict[tuple[int, int], tuple[torch.Tensor, float]] = {}
        # cos/sin tables of the latest positions: every layer of one forward pass
        # rotates q and k at the same positions, so the tables are built once per pass.
        self._tables: dict[tuple, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}

    def set_length(self, length: int) -> None:
        """Declare the sequence length (dynamic NTK and longrope depend on it)."""
        self._length = length

    @property
    def length(self) -> int:
        return self._length

    def _freq_key(self, dim: int) -> tuple[int, int]:
        """What the inverse frequencies depend on: the dimension and, for dynamic
        NTK and LongRoPE, the declared length."""
        kind = self.scaling.type
        key_len = self._length if kind in ("dynamic", "longrope") else 0
        if kind == "dynamic":
            key_len = max(key_len, self.l0)
        elif kind == "longrope":
            key_len = int(key_len > self.l0)
        return dim, key_len

    def inv_freq(self, dim: int) -> tuple[torch.Tensor, float]:
        key = self._freq_key(dim)
        if key not in self._cache:
            self._cache[key] = inv_freq_and_factor(
                self.scaling, dim, self.base, self.l0, self.max_pos, self._length
            )
        return self._cache[key]

    def cos_sin(
        self, positions: torch.Tensor, dim: int, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin of shape (T, dim), attention factor folded in, in `dtype`.
        The tables of the latest positions are kept and returned again (read-only)
        while the positions, scaling, layout and dtype stay the same."""
        key = (self._freq_key(dim), self.interleaved, dtype, positions.device,
               torch.is_inference_mode_enabled())
        hit = self._tables.get(key)
        if hit is not None and hit[0].shape == positions.shape and torch.equal(hit[0], positions):
            return hit[1], hit[2]
        inv, factor = self.inv_freq(dim)
        # float32 angles like transformers, so logits match it bit-for-bit closely.
        angles = positions.to(torch.float32)[:, None] * inv.to(torch.float32)[None, :]  # (T, dim/2)
        if self.interleaved:
            angles = angles.repeat_interleave(2, dim=-1)
        else:
            angles = torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos(), angles.sin()
        if factor != 1.0:
            cos, sin = cos * factor, sin * factor
        cos, sin = cos.to(dtype), sin.to(dtype)
        if len(self._tables) >= 4:  # positions moved on (next chunk or decode step)
            self._tables.clear()
        self._tables[key] = (positions.clone(), cos, sin)
        return cos, sin


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """Rotate the first `cos.shape[-1]` channels of x (B, H, T, D); pass the rest through.

    Pairs (x1, x2) -- channels (i, i + dim/2) in the half layout, (2i, 2i+1)
    interleaved -- become (x1 cos - x2 sin, x2 cos + x1 sin)."""
    dim = cos.shape[-1]
    if interleaved:
        first, second = slice(0, dim, 2), slice(1, dim, 2)
    else:
        first, second = slice(0, dim // 2), slice(dim // 2, dim)
    x1, x2 = x[..., first], x[..., second]
    c1, c2, s1, s2 = cos[..., first], cos[..., second], sin[..., first], sin[..., second]
    if torch.is_grad_enabled() and x.requires_grad:
        # Out of place for autograd (training).
        o1, o2 = x1 * c1 - x2 * s1, x2 * c2 + x1 * s2
        out = torch.stack((o1, o2), dim=-1).flatten(-2) if interleaved else torch.cat((o1, o2), dim=-1)
        return torch.cat((out, x[..., dim:]), dim=-1) if dim < x.shape[-1] else out
    # Inference: write both halves into one fresh buffer, no concatenations.
    out = torch.empty_like(x)
    o1, o2 = out[..., first], out[..., second]
    torch.mul(x1, c1, out=o1)
    o1.addcmul_(x2, s1, value=-1)
    torch.mul(x2, c2, out=o2)
    o2.addcmul_(x1, s2)
    if dim < x.shape[-1]:
        out[..., dim:] = x[..., dim:]
    return out
