"""Model configuration: one dataclass for every decoder lctx runs, and the reading of
our own `config.json` format. A leaf: the families (`checkpoints.families`, what each
Hugging Face family reads; transformers v4 `rope_scaling` and v5 `rope_parameters`
spellings) and RoPE read it, and `checkpoints.config_reader` (above both) reads any
config.json. The RoPE scaling is a `checkpoints.rope.RopeScaling` (also
importable from here), read by the rules of its method's row in
`checkpoints.rope.ROPE_METHODS`.

The per-layer pattern is explicit when saved: `layer_types` names each layer
full or sliding, `attention.layers` gives a layer its own variant or position
(NoPE layers), and `rope_local_theta` is the RoPE base of the sliding layers."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpoints.errors import ConfigError
from checkpoints.rope import (
    L0_KEY,
    RopeScaling,
    check_factor_lists,
    check_theta,
    parse_rope_override,
    rope_method_of,
)

OWN_MODEL_TYPE = "lctx"
ROTARY_LAYOUTS = ("half", "interleaved")
POSITIONS = ("rope", "nope", "alibi", "nape")
LAYER_TYPES = ("full_attention", "sliding_attention")
NORM_PLACEMENTS = ("pre", "sandwich", "post")  # Llama; Gemma 2/3 (pre and post); OLMo 2 (post only)
QK_NORMS = ("head", "projection")  # per head over head_dim (Qwen3, Gemma 3); over the whole projection (OLMo 2)
ACTIVATIONS = ("silu", "gelu_pytorch_tanh")
LAYER_OVERRIDE_KEYS = ("variant", "params", "position")


@dataclass
class AttentionConfig:
    """Which attention variant each layer uses, and its hyper-parameters.

    `variant`/`params`/`position` is the default for every layer; `layers` maps
    a layer index to an override `{"variant": ..., "params": {...}, "position":
    ...}` (cog, diff and intg are used on a subset of layers in their papers;
    SmolLM3 drops RoPE on every fourth layer: `{"position": "nope"}`)."""

    variant: str = "softmax"
    params: dict[str, Any] = field(default_factory=dict)
    layers: dict[int, dict[str, Any]] = field(default_factory=dict)
    position: str = "rope"

    def __post_init__(self) -> None:
        self.layers = {int(k): dict(v) for k, v in self.layers.items()}
        for position in (self.position, *(o["position"] for o in self.layers.values() if "position" in o)):
            if position not in POSITIONS:
                raise ConfigError(f"unknown position {position!r}; supported: {', '.join(POSITIONS)}")
        for layer, override in self.layers.items():
            unknown = sorted(set(override) - set(LAYER_OVERRIDE_KEYS))
            if unknown:
                raise ConfigError(f"attention.layers[{layer}] has unknown keys {unknown}; "
                                  f"a layer override takes {', '.join(LAYER_OVERRIDE_KEYS)}")

    def for_layer(self, layer: int) -> tuple[str, dict[str, Any]]:
        """(variant name, params) for one layer, with overrides applied: an override
        naming a variant brings its own params; one that does not keeps the default's."""
        override = self.layers.get(layer)
        if override is None or ("variant" not in override and "params" not in override):
            return self.variant, dict(self.params)
        return override.get("variant", self.variant), dict(override.get("params", {}))

    def position_for(self, layer: int) -> str:
        """The positional treatment of one layer (rope, nope, alibi or nape)."""
        return self.layers.get(layer, {}).get("position", self.position)

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "params": self.params,
            "layers": {str(k): v for k, v in self.layers.items()},
            "position": self.position,
        }


# Largest value each size field may take: far above any released decoder (Llama 3.1 405B:
# hidden 16384, 126 layers, 128 heads, intermediate 53248, vocab 128256), low enough that a
# config cannot make a worker build layers or embeddings without bound.
SIZE_LIMITS: dict[str, int] = {
    "hidden_size": 65_536, "num_layers": 1_024, "num_heads": 1_024, "num_kv_heads": 1_024, "head_dim": 4_096,
    "intermediate_size": 1 << 20, "vocab_size": 1 << 22, "max_position_embeddings": 1 << 24,
    "sliding_window": 1 << 24,
}


@dataclass
class ModelConfig:
    """A pre-LN decoder: RMSNorm, gated MLP, RoPE, grouped-query attention, and the
    options by which the families differ (norm placement, q/k norm, windows per
    layer, softcapping, ...). The defaults are Llama's."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    vocab_size: int
    num_kv_heads: int | None = None
    head_dim: int | None = None
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False  # Llama's attention_bias also biases o_proj; Qwen2 biases only q, k, v
    mlp_bias: bool = False
    hidden_act: str = "silu"  # of the gated MLP: silu (SwiGLU) or gelu_pytorch_tanh (Gemma's GeGLU)
    norm_placement: str = "pre"  # one of NORM_PLACEMENTS
    norm_unit_offset: bool = False  # Gemma's RMSNorm scales by (1 + w)
    qk_norm: str | None = None  # one of QK_NORMS: RMSNorm of q and k before RoPE
    embedding_multiplier: float = 1.0  # Gemma scales the embeddings by sqrt(hidden_size)
    attention_scale: float | None = None  # multiplier of q.k; None: 1/sqrt(head_dim) (Gemma: query_pre_attn_scalar^-1/2)
    attn_logit_softcapping: float | None = None  # attention logits a -> c tanh(a / c)
    final_logit_softcapping: float | None = None  # output logits, the same map
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    partial_rotary_factor: float = 1.0
    rotary_layout: str = "half"
    sliding_window: int | None = None
    layer_types: list[str] | None = None  # per layer, one of LAYER_TYPES; None: every layer full
    rope_local_theta: float | None = None  # RoPE base of sliding layers, unscaled (Gemma 3); None: as global
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    bos_token_id: int | None = None
    eos_token_id: list[int] = field(default_factory=list)
    torch_dtype: str = "float32"
    source_format: str = OWN_MODEL_TYPE  # "lctx" or the HF model_type it was read from

    def __post_init__(self) -> None:
        self._check_sizes()
        if isinstance(self.rope_scaling, dict):
            self.rope_scaling = RopeScaling.from_dict(self.rope_scaling)
        if isinstance(self.attention, dict):
            self.attention = AttentionConfig(**self.attention)
        if self.num_kv_heads is None:
            self.num_kv_heads = self.num_heads
        if self.head_dim is None:
            if self.hidden_size % self.num_heads:
                raise ConfigError(
                    f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}; "
                    "set head_dim explicitly"
                )
            self.head_dim = self.hidden_size // self.num_heads
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"num_heads {self.num_heads} must be a multiple of num_kv_heads {self.num_kv_heads}"
            )
        if self.rotary_layout not in ROTARY_LAYOUTS:
            raise ConfigError(
                f"rotary_layout must be one of {ROTARY_LAYOUTS}, got {self.rotary_layout!r}"
            )
        if not 0.0 < self.partial_rotary_factor <= 1.0:
            raise ConfigError(f"partial_rotary_factor must be in (0, 1], got {self.partial_rotary_factor}")
        check_theta(self.rope_theta)
        check_factor_lists(self.rope_scaling, self.rotary_dim)
        if isinstance(self.eos_token_id, int):
            self.eos_token_id = [self.eos_token_id]
        self.eos_token_id = list(self.eos_token_id or [])
        self._check_architecture()

    def _check_sizes(self) -> None:
        """Every size a positive integer within SIZE_LIMITS, checked before anything is built."""
        for name, limit in SIZE_LIMITS.items():
            value = getattr(self, name)
            if value is None and name in ("num_kv_heads", "head_dim", "sliding_window"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
                raise ConfigError(f"{name} must be an integer from 1 to {limit:,}, got {value!r}")

    def matrix_parameters(self) -> int:
        """Parameters of the embedding, attention, MLP and output matrices this config
        describes: a lower bound of the real count (norms, biases and variant gains are left
        out), so weights holding fewer parameters than this cannot be this model."""
        h, hd = self.hidden_size, self.head_dim
        attention = h * hd * (2 * self.num_heads + 2 * self.num_kv_heads)
        mlp = 3 * h * self.intermediate_size
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return embeddings + self.num_layers * (attention + mlp)

    def _check_architecture(self) -> None:
        """The family options: each a known value, the per-layer lists as long as the model."""
        for name, value, allowed in (("norm_placement", self.norm_placement, NORM_PLACEMENTS),
                                     ("hidden_act", self.hidden_act, ACTIVATIONS),
                                     ("qk_norm", self.qk_norm, (None, *QK_NORMS))):
            if value not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(map(str, allowed))}, got {value!r}")
        for name in ("attention_scale", "attn_logit_softcapping", "final_logit_softcapping", "rope_local_theta"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < float("inf")):
                raise ConfigError(f"{name} must be a positive number or null, got {value!r}")
        if not 0 < self.embedding_multiplier < float("inf"):
            raise ConfigError(f"embedding_multiplier must be a positive number, got {self.embedding_multiplier!r}")
        if self.sliding_window is not None and (isinstance(self.sliding_window, bool) or self.sliding_window < 1):
            raise ConfigError(f"sliding_window must be a positive integer or null, got {self.sliding_window!r}")
        if self.layer_types is None and self.sliding_window is not None:
            self.layer_types = ["sliding_attention"] * self.num_layers  # Mistral: every layer windowed
        if self.layer_types is not None:
            self.layer_types = list(self.layer_types)
            if len(self.layer_types) != self.num_layers:
                raise ConfigError(f"layer_types lists {len(self.layer_types)} layers; the model has {self.num_layers}")
            unknown = sorted(set(self.layer_types) - set(LAYER_TYPES))
            if unknown:
                raise ConfigError(f"layer_types has unknown entries {unknown}; each is one of {', '.join(LAYER_TYPES)}")
        bad_layers = sorted(i for i in self.attention.layers if not 0 <= i < self.num_layers)
        if bad_layers:
            raise ConfigError(f"attention.layers names layers {bad_layers}; the model has layers 0..{self.num_layers - 1}")

    def is_sliding(self, layer: int) -> bool:
        """Whether `layer` attends within the sliding window (a window must be set)."""
        return (self.sliding_window is not None and self.layer_types is not None
                and self.layer_types[layer] == "sliding_attention")

    def window_for(self, layer: int) -> int | None:
        """The sliding window of one layer, or None for full attention."""
        return self.sliding_window if self.is_sliding(layer) else None

    def uses_local_rope(self, layer: int) -> bool:
        """Whether `layer` rotates with the local RoPE (`rope_local_theta`, unscaled)."""
        return self.rope_local_theta is not None and self.is_sliding(layer)

    def local_rope_config(self) -> ModelConfig:
        """This config with the sliding layers' RoPE as its own: the local base, no scaling."""
        return dataclasses.replace(self, rope_theta=self.rope_local_theta, rope_scaling=RopeScaling(),
                                   rope_local_theta=None)

    @property
    def logit_scale(self) -> float:
        """The multiplier of q.k in the attention logits."""
        return self.attention_scale if self.attention_scale is not None else self.head_dim ** -0.5

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def rope_l0(self) -> int:
        """Original (pre-training) context length L0 for the RoPE scaling."""
        return self.rope_scaling.original_max_position_embeddings or self.max_position_embeddings

    @property
    def effective_context(self) -> int:
        """The context the scaling is meant to reach: L0 x factor for a method that
        needs a factor; otherwise (no scaling, or LongRoPE, whose factor is derived
        from it) `max_position_embeddings`."""
        s = self.rope_scaling
        if s.method.needs_factor:
            return int(self.rope_l0 * s.factor)
        return self.max_position_embeddings

    def with_rope(self, scaling: RopeScaling) -> ModelConfig:
        return dataclasses.replace(self, rope_scaling=scaling)

    # --- serialisation -------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["model_type"] = OWN_MODEL_TYPE
        out["rope_parameters"] = {"rope_theta": self.rope_theta, **self.rope_scaling.to_dict()}
        del out["rope_scaling"], out["rope_theta"], out["source_format"]
        out["attention"] = self.attention.to_dict()
        return out

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")


def require_keys(raw: dict[str, Any], keys: tuple[str, ...], what: str) -> None:
    missing = [k for k in keys if k not in raw]
    if missing:
        raise ConfigError(f"{what} config is missing required keys: {', '.join(missing)}")


def rope_from_raw(raw: dict[str, Any]) -> tuple[float, RopeScaling, float]:
    """(theta, scaling, partial rotary factor) from either the v5 `rope_parameters`
    (which may hold `rope_theta` and `partial_rotary_factor`) or the v4 keys."""
    if raw.get("rope_parameters"):
        params = dict(raw["rope_parameters"])
        theta = float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))
    else:
        params = dict(raw.get("rope_scaling") or {})
        theta = float(raw.get("rope_theta", 10000.0))
    partial = float(params.pop("partial_rotary_factor", None) or raw.get("partial_rotary_factor") or 1.0)
    method = rope_method_of(params)
    # Where L0 comes from is the method's row (see checkpoints.rope.OriginalLength).
    if method.original_length == "config" and L0_KEY not in params and L0_KEY in raw:
        params[L0_KEY] = raw[L0_KEY]
    if method.original_length == "max_position":
        params.pop(L0_KEY, None)
    if method.derive_factor is not None and "factor" not in params and params.get(L0_KEY):
        params["factor"] = method.derive_factor(params[L0_KEY], raw["max_position_embeddings"])
    return theta, RopeScaling.from_dict(params), partial


def own_config(raw: dict[str, Any]) -> ModelConfig:
    """A config.json of lctx's own format (model_type "lctx" or none)."""
    require_keys(raw, ("hidden_size", "num_layers", "num_heads", "intermediate_size", "vocab_size"), "lctx")
    raw = dict(raw)
    raw.pop("model_type", None)
    theta, scaling, partial = rope_from_raw(raw)
    raw.pop("rope_parameters", None)
    raw.pop("rope_scaling", None)
    raw["rope_theta"] = theta
    raw["rope_scaling"] = scaling
    raw["partial_rotary_factor"] = partial
    known = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown keys in lctx config: {unknown}")
    return ModelConfig(**raw)


def apply_rope_override(value: str | dict[str, Any] | None, config: ModelConfig) -> ModelConfig:
    """The checkpoint's config with a job's RoPE override applied: its scaling and, where a
    dict gives one, its `rope_theta` (the base; results record the base that ran). The config
    is built again, so what depends on the model's sizes (LongRoPE's factor lists) is checked
    against this checkpoint."""
    scaling = parse_rope_override(value, config)
    theta = value.get("rope_theta") if isinstance(value, dict) else None
    return dataclasses.replace(config, rope_scaling=scaling,
                               rope_theta=config.rope_theta if theta is None else float(theta))
