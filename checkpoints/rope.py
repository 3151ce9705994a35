"""Rotary position embeddings and the table of RoPE scaling methods (the
formulas: see docs/protocols/rope.md).

`ROPE_METHODS` is the one place a method's name means anything. Each row says
how the method computes its inverse frequencies and attention factor, whether it
needs a factor, where its original length L0 comes from, whether and how it
follows the sequence length, and which extra keys it reads. Validation
(`RopeScaling`), config reading and job overrides (a config gets one through
`checkpoints.config.apply_rope_override`), the effective context,
`Rotary` and the decoder's per-length update read the row. Adding a method is a
frequency function, a row and its test.

Pure functions compute `(inv_freq, attention_factor)`; `Rotary` turns them
into cos/sin tables for a range of positions and applies them in either
layout. All scaling maths lives here and nowhere else."""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import torch

from checkpoints.errors import ConfigError

L0_KEY = "original_max_position_embeddings"
# After a prefill, a method whose frequencies follow the sequence length either keeps
# the prompt's length for the generated tokens ("prefill") or follows every step ("step").
LENGTH_UPDATES = ("prefill", "step")

# Bounds of every numeric RoPE parameter, checked for configs and job overrides alike:
# outside them a value is a typo or an attack (nan, inf, 1e308), never an experiment.
# (low, high, low is exclusive); docs/guide/model-runtime.md's RoPE section lists them.
MAX_ROPE_FACTOR = 4096.0  # 4k tokens x 4096 = 16M: beyond any context a GPU holds
ROPE_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "factor": (0.0, MAX_ROPE_FACTOR, True),
    "original_max_position_embeddings": (1, 16_777_216, False),
    "beta_fast": (0.0, 10_000.0, True),
    "beta_slow": (0.0, 10_000.0, True),
    "mscale": (0.0, 100.0, False),
    "mscale_all_dim": (0.0, 100.0, False),
    "attention_factor": (0.0, 100.0, True),
    "low_freq_factor": (0.0, 10_000.0, True),
    "high_freq_factor": (0.0, 10_000.0, True),
}
FACTOR_LIST_BOUNDS = (0.0, 10_000.0)  # each LongRoPE long/short factor, exclusive low
# The base (`rope_theta`) of a config or a job's override: a base of 0 or below divides by
# zero or turns the rotation around; the upper bound is far above any released model's base.
THETA_BOUNDS = (0.0, 1e15, True)


# --- the closed forms -----------------------------------------------------


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


# --- the parameters of one method -------------------------------------------


@dataclass
class RopeScaling:
    """One RoPE scaling method and its parameters (see docs/protocols/rope.md).

    `type` names a row of `ROPE_METHODS`; the row says which of the fields below
    the method reads. `original_max_position_embeddings` is L0; when None the
    model's `max_position_embeddings` is used (see `ModelConfig.rope_l0`)."""

    type: str = "default"
    factor: float = 1.0
    original_max_position_embeddings: int | None = None
    # yarn
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None  # also longrope
    truncate: bool = True
    # llama3
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    # longrope
    long_factor: list[float] | None = None
    short_factor: list[float] | None = None
    # dynamic: "prefill" keeps the base computed from the prompt length for the
    # generated tokens (lctx default); "step" recomputes it at every decode step
    # from the current length, as transformers does.
    dynamic_update: str = "prefill"

    def __post_init__(self) -> None:
        method = rope_method(self.type)  # an unknown name is an error listing the table
        self.type = method.name
        _check_numbers(self)
        self.factor = float(self.factor)
        if method.needs_factor and self.factor < 1.0:
            raise ConfigError(
                f"rope scaling factor must be >= 1 for {self.type!r}, got {self.factor}; "
                "a factor below 1 would shrink the context instead of extending it"
            )
        if method.check is not None:
            method.check(self)
        if self.dynamic_update not in LENGTH_UPDATES:
            raise ConfigError(
                f"dynamic_update must be {' or '.join(map(repr, LENGTH_UPDATES))}, got {self.dynamic_update!r}"
            )

    @property
    def method(self) -> RopeMethod:
        return rope_method(self.type)

    def to_dict(self) -> dict[str, Any]:
        """The v5 `rope_parameters`-style dict, without fields left at their defaults
        (but with the factor of a method that uses one, and the keys its row records)."""
        method = self.method
        out: dict[str, Any] = {"rope_type": self.type}
        defaults = RopeScaling()
        for f in dataclasses.fields(self):
            if f.name == "type":
                continue
            value = getattr(self, f.name)
            if value != getattr(defaults, f.name):
                out[f.name] = value
        if method.uses_factor:
            out["factor"] = self.factor
        for key in method.records:
            out[key] = getattr(self, key)
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any] | None) -> RopeScaling:
        """Accept v4 (`type` or `rope_type`) and v5 spellings and a method's aliases;
        ignore `rope_theta`."""
        if not raw:
            return cls()
        raw = dict(raw)
        kind = raw.pop("rope_type", None) or raw.pop("type", None) or "default"
        raw.pop("type", None)
        raw.pop("rope_theta", None)
        known = {f.name for f in dataclasses.fields(cls)} - {"type"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(
                f"unknown rope scaling keys {unknown} for rope type {kind!r}; "
                f"known keys: {sorted(known)}"
            )
        method = rope_method(kind)
        if method.needs_factor and raw.get("factor") is None:
            raise ConfigError(f"rope type {kind!r} needs a 'factor' (the context extension ratio, for example 4.0)")
        return cls(type=method.name, **raw)


def _number(name: str, value: Any, low: float, high: float, open_low: bool) -> None:
    """A real number (not a bool, not nan/inf) in its range, or a ConfigError naming it."""
    where = name if name.startswith("rope_") else f"rope {name}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ConfigError(f"{where} must be a finite number, got {value!r}")
    if value > high or value < low or (open_low and value == low):
        side = ">" if open_low else ">="
        raise ConfigError(f"{where} must be {side} {low:g} and <= {high:g}, got {value!r}")


def check_theta(theta: Any) -> None:
    """`rope_theta` is a finite number within THETA_BOUNDS, or a ConfigError naming it."""
    _number("rope_theta", theta, *THETA_BOUNDS)


def check_factor_lists(s: RopeScaling, dim: int) -> None:
    """LongRoPE's factor lists hold one factor per rotated pair of the model: `dim` / 2 for a
    rotary dimension `dim` (head_dim x partial_rotary_factor). Checked when a config is built
    (with its own scaling or a job's override), not first when a prompt runs."""
    for name in ("long_factor", "short_factor"):
        values = getattr(s, name)
        if values is not None and len(values) != dim // 2:
            raise ConfigError(f"rope {name} has {len(values)} entries; this model rotates {dim} dimensions of each "
                              f"head, so LongRoPE needs dim/2 = {dim // 2} factors in each list")


def _check_numbers(s: RopeScaling) -> None:
    """Every numeric field within `ROPE_BOUNDS`, the factor lists within theirs, and the
    pairs that must be ordered (yarn's betas, llama3's frequency factors) ordered."""
    for name, (low, high, open_low) in ROPE_BOUNDS.items():
        value = getattr(s, name)
        if value is not None:
            _number(name, value, low, high, open_low)
    if s.original_max_position_embeddings is not None and not isinstance(s.original_max_position_embeddings, int):
        raise ConfigError(f"rope original_max_position_embeddings must be an integer number of tokens, "
                          f"got {s.original_max_position_embeddings!r}")
    for name in ("long_factor", "short_factor"):
        values = getattr(s, name)
        if values is None:
            continue
        if not isinstance(values, list | tuple) or not values:
            raise ConfigError(f"rope {name} must be a non-empty list of numbers, got {values!r}")
        for i, v in enumerate(values):
            _number(f"{name}[{i}]", v, *FACTOR_LIST_BOUNDS, True)
    if s.beta_fast <= s.beta_slow:
        raise ConfigError(f"rope beta_fast ({s.beta_fast}) must be greater than beta_slow ({s.beta_slow}): "
                          "YaRN interpolates the dimensions between them (defaults 32 and 1)")
    if s.high_freq_factor <= s.low_freq_factor:
        raise ConfigError(f"rope high_freq_factor ({s.high_freq_factor}) must be greater than low_freq_factor "
                          f"({s.low_freq_factor}) (defaults 4 and 1)")
    if not isinstance(s.truncate, bool):
        raise ConfigError(f"rope truncate must be true or false, got {s.truncate!r}")


# --- the table row ----------------------------------------------------------

# (scaling, rotary dim, base, L0, sequence length) -> inv_freq of shape (dim/2,), float64
FreqFn = Callable[[RopeScaling, int, float, int, int], torch.Tensor]
# Where a method's original (pre-training) length L0 comes from:
#   "none"          it has none (no scaling)
#   "max_position"  always max_position_embeddings; an explicit one is dropped when a
#                   config is read (transformers' dynamic NTK)
#   "scaling"       the scaling's own original_max_position_embeddings, else
#                   max_position_embeddings; a job override fills in the checkpoint's L0
#   "config"        as "scaling", and also read from a config's top level (transformers
#                   moves it into the RoPE parameters for these; Phi-3 writes it there)
OriginalLength = Literal["none", "max_position", "scaling", "config"]


@dataclass(frozen=True)
class RopeMethod:
    """One row of `ROPE_METHODS`: everything lctx knows about one RoPE method."""

    name: str
    inv_freq: FreqFn
    # (scaling, L0, max_position_embeddings) -> the factor multiplying cos and sin; None: 1
    attention_factor: Callable[[RopeScaling, int, int], float] | None = None
    # A factor >= 1 must be given, and the model then claims L0 x factor tokens.
    needs_factor: bool = False
    # (L0, max_position_embeddings) -> the factor when a config gives none (longrope);
    # such a model claims its max_position_embeddings.
    derive_factor: Callable[[int, int], float] | None = None
    original_length: OriginalLength = "none"
    # (declared sequence length, L0) -> the part of the length the frequencies depend
    # on (their cache key); None: they do not depend on it.
    length_key: Callable[[int, int], int] | None = None
    # scaling -> one of LENGTH_UPDATES: how the declared length moves after a prefill.
    length_update: Callable[[RopeScaling], str] | None = None
    # The RopeScaling fields it reads beyond type, factor and L0 (their defaults are
    # the dataclass's), and the validation they need beyond their types.
    keys: tuple[str, ...] = ()
    check: Callable[[RopeScaling], None] | None = None
    # Keys written into configs and results even at their defaults.
    records: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()  # other names configs use for it

    @property
    def uses_factor(self) -> bool:
        return self.needs_factor or self.derive_factor is not None

    @property
    def takes_original_length(self) -> bool:
        return self.original_length in ("scaling", "config")


# --- the methods: frequency functions and attention rules ---------------------


def default_freq(s: RopeScaling, dim: int, base: float, l0: int, length: int) -> torch.Tensor:
    return default_inv_freq(dim, base)


def linear_freq(s: RopeScaling, dim: int, base: float, l0: int, length: int) -> torch.Tensor:
    """Position interpolation: every frequency divided by the factor."""
    return default_inv_freq(dim, base) / s.factor


def ntk_freq(s: RopeScaling, dim: int, base: float, l0: int, length: int) -> torch.Tensor:
    return default_inv_freq(dim, ntk_base(base, s.factor, dim))


def dynamic_freq(s: RopeScaling, dim: int, base: float, l0: int, length: int) -> torch.Tensor:
    return default_inv_freq(dim, dynamic_base(base, s.factor, dim, length, l0))


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def yarn_attention(s: RopeScaling, l0: int, max_pos: int) -> float:
    if s.attention_factor is not None:
        return float(s.attention_factor)
    if s.mscale is not None and s.mscale_all_dim is not None:
        return _yarn_mscale(s.factor, s.mscale) / _yarn_mscale(s.factor, s.mscale_all_dim)
    return _yarn_mscale(s.factor)


def yarn_freq(s: RopeScaling, dim: int, base: float, l0: int, length: int) -> torch.Tensor:
    """YaRN (Peng et al. 2023): ramp between interpolated and original frequencies."""

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
    return (inv / s.factor) * (1 - keep) + inv * keep


def llama3_freq(s: RopeScaling, dim: int, base: float, l0: int, length: int) -> torch.Tensor:
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


def longrope_factor(l0: int, max_pos: int) -> float:
    """LongRoPE's factor when a config gives none: the extension max_pos / L0."""
    return max_pos / l0


def longrope_attention(s: RopeScaling, l0: int, max_pos: int) -> float:
    """`sqrt(1 + ln(s) / ln(L0))`, 1 when s <= 1 (a factor of 0 means: derive it)."""
    if s.attention_factor is not None:
        return float(s.attention_factor)
    scale = s.factor or longrope_factor(l0, max_pos)
    return 1.0 if scale <= 1.0 else math.sqrt(1 + math.log(scale) / math.log(l0))


def longrope_freq(s: RopeScaling, dim: int, base: float, l0: int, length: int) -> torch.Tensor:
    """LongRoPE (Phi-3): per-pair rescale factors, long ones beyond L0."""
    ext = s.long_factor if length > l0 else s.short_factor
    assert ext is not None  # validated in RopeScaling
    check_factor_lists(s, dim)
    ext_t = torch.tensor(ext, dtype=torch.float64)
    return 1.0 / (ext_t * base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim))


def _check_longrope(s: RopeScaling) -> None:
    if s.long_factor is None or s.short_factor is None:
        raise ConfigError("longrope scaling needs both 'long_factor' and 'short_factor' lists")


# --- the table ----------------------------------------------------------------

ROPE_METHODS: dict[str, RopeMethod] = {m.name: m for m in (
    RopeMethod("default", default_freq),
    RopeMethod("linear", linear_freq, needs_factor=True, original_length="scaling"),
    RopeMethod("ntk", ntk_freq, needs_factor=True, original_length="scaling"),
    RopeMethod("dynamic", dynamic_freq, needs_factor=True, original_length="max_position",
               length_key=lambda length, l0: max(length, l0),
               length_update=lambda s: s.dynamic_update,
               keys=("dynamic_update",), records=("dynamic_update",)),  # results say which base generation used
    RopeMethod("yarn", yarn_freq, yarn_attention, needs_factor=True, original_length="config",
               keys=("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate")),
    RopeMethod("llama3", llama3_freq, needs_factor=True, original_length="config",
               keys=("low_freq_factor", "high_freq_factor")),
    RopeMethod("longrope", longrope_freq, longrope_attention, derive_factor=longrope_factor,
               original_length="config",
               length_key=lambda length, l0: int(length > l0),  # short factors up to L0, long ones beyond
               length_update=lambda s: "step",
               keys=("long_factor", "short_factor", "attention_factor"), check=_check_longrope,
               aliases=("su",)),  # Phi-3's old name
)}


def rope_method(name: Any) -> RopeMethod:
    """The row for a method's name or alias; an unknown name is an error listing the table."""
    if isinstance(name, str):
        if name in ROPE_METHODS:
            return ROPE_METHODS[name]
        for method in ROPE_METHODS.values():
            if name in method.aliases:
                return method
    raise ConfigError(f"unknown rope type {name!r}; supported rope types: {', '.join(ROPE_METHODS)}")


def rope_method_of(raw: dict[str, Any]) -> RopeMethod:
    """The row a RoPE parameter dict names (v5 `rope_type` or v4 `type`; neither: default)."""
    return rope_method(raw.get("rope_type") or raw.get("type") or "default")


def inv_freq_and_factor(
    scaling: RopeScaling, dim: int, base: float, l0: int, max_pos: int, length: int = 0
) -> tuple[torch.Tensor, float]:
    """(inv_freq in float64 of shape (dim/2,), attention factor) for a sequence of
    `length` tokens (only methods with a `length_key` depend on it)."""
    method = rope_method(scaling.type)
    inv = method.inv_freq(scaling, dim, base, l0, length)
    factor = method.attention_factor(scaling, l0, max_pos) if method.attention_factor else 1.0
    return inv, factor


ASCII_NUMBER = re.compile(r"([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


class RopeConfig(Protocol):
    """What RoPE reads of a model's config (`checkpoints.config.ModelConfig` has it): the table
    and `Rotary` sit below the config, which reads them to validate itself."""

    rope_scaling: RopeScaling
    rope_theta: float
    max_position_embeddings: int
    rotary_layout: str

    @property
    def rope_l0(self) -> int: ...


def parse_rope_override(value: str | dict[str, Any] | RopeScaling | None, config: RopeConfig) -> RopeScaling:
    """A job's RoPE override: `"yarn:4"`, `"ntk:8"`, `"none"`, or a dict in
    either transformers spelling (a dict's `rope_theta` is checked here and applied by
    `checkpoints.config.apply_rope_override`). A method that takes an original length gets the checkpoint's
    L0 unless the override gives one."""
    if value is None:
        return config.rope_scaling
    if isinstance(value, RopeScaling):
        return value
    if isinstance(value, dict):
        raw = dict(value)
        if not (raw.get("rope_type") or raw.get("type")):
            raise ConfigError(f"a rope override dict must name its method in 'rope_type' (one of "
                              f"{', '.join(ROPE_METHODS)}), e.g. {{'rope_type': 'yarn', 'factor': 4}}; got {value!r}")
        if "rope_theta" in raw:  # the base, applied by config.apply_rope_override; checked here
            check_theta(raw["rope_theta"])
    elif isinstance(value, str):
        text = value.strip().lower()
        if text in ("", "checkpoint"):
            return config.rope_scaling
        if text == "none":
            return RopeScaling()
        kind, _, factor = text.partition(":")
        raw = {"rope_type": kind}
        if factor:
            # ASCII digits only: float() also reads '٤' (Arabic-Indic four), '1_0', 'inf' and 'nan'
            if not ASCII_NUMBER.fullmatch(factor):
                raise ConfigError(f"rope override {value!r}: factor {factor!r} is not a finite number written in "
                                  "ASCII digits, like '4' or '2.5'")
            raw["factor"] = float(factor)
        elif rope_method(kind).uses_factor:
            raise ConfigError(f"rope override {value!r} needs a factor, for example '{kind}:4'")
    else:
        raise ConfigError(f"rope override must be a string like 'yarn:4' or a dict, got {type(value).__name__}")
    method = rope_method_of(raw)
    if method.takes_original_length and L0_KEY not in raw:
        raw[L0_KEY] = config.rope_l0
    return RopeScaling.from_dict(raw)


class Rotary:
    """cos/sin tables for one model. Holds the scaling and the sequence length the
    frequencies were last computed for (set at prefill; dynamic NTK and LongRoPE
    depend on it)."""

    def __init__(self, config: RopeConfig) -> None:
        self.config = config
        self.scaling = config.rope_scaling
        self.base = config.rope_theta
        self.l0 = config.rope_l0
        self.max_pos = config.max_position_embeddings
        self.interleaved = config.rotary_layout == "interleaved"
        self._length = 0  # the sequence length the current tables were built for
        self._cache: dict[tuple[int, int], tuple[torch.Tensor, float]] = {}
        # inv_freq as float32 on each device it was asked for: copied once, not every forward (a
        # pageable host-to-device copy synchronises, and cannot be captured in a CUDA graph).
        self._on_device: dict[tuple, torch.Tensor] = {}

    def set_length(self, length: int) -> None:
        """Declare the sequence length (methods with a `length_key` depend on it)."""
        self._length = length

    @property
    def length(self) -> int:
        return self._length

    @property
    def depends_on_length(self) -> bool:
        """Whether the frequencies depend on the sequence length (dynamic NTK, LongRoPE):
        rows of different lengths then need different tables."""
        return self.scaling.method.length_key is not None

    @property
    def length_update(self) -> str | None:
        """How the declared length moves after a prefill (one of LENGTH_UPDATES), or
        None when the frequencies do not depend on it."""
        update = self.scaling.method.length_update
        return update(self.scaling) if update is not None else None

    def _freq_key(self, dim: int) -> tuple[int, int]:
        """What the inverse frequencies depend on: the dimension and, for a method
        with a `length_key` (dynamic NTK, LongRoPE), its part of the declared length."""
        length_key = self.scaling.method.length_key
        return dim, length_key(self._length, self.l0) if length_key is not None else 0

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
        """cos, sin of shape (T, dim), attention factor folded in, in `dtype`, on the
        positions' device. No host synchronisation: a forward pass builds its tables once
        and every layer shares them (`AttentionContext.rope_tables`)."""
        inv, factor = self.inv_freq(dim)
        key = (self._freq_key(dim), positions.device)
        if key not in self._on_device:
            self._on_device[key] = inv.to(positions.device, torch.float32)
        # float32 angles like transformers, so logits match it bit-for-bit closely.
        angles = positions.to(torch.float32)[:, None] * self._on_device[key][None, :]  # (T, dim/2)
        if self.interleaved:
            angles = angles.repeat_interleave(2, dim=-1)
        else:
            angles = torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos(), angles.sin()
        if factor != 1.0:
            cos, sin = cos * factor, sin * factor
        return cos.to(dtype), sin.to(dtype)


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
