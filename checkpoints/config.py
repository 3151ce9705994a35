"""Model configuration: one dataclass for the Llama family, read from our own
`config.json` or from Hugging Face Llama / Mistral / Qwen2 configs (transformers
v4 `rope_scaling` and v5 `rope_parameters` spellings). The RoPE scaling is a
`checkpoints.rope.RopeScaling` (also importable from here), read by the rules
of its method's row in `checkpoints.rope.ROPE_METHODS`."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpoints.errors import ConfigError
from checkpoints.rope import L0_KEY, RopeScaling, rope_method_of

HF_MODEL_TYPES = ("llama", "mistral", "qwen2")
OWN_MODEL_TYPE = "lctx"
ROTARY_LAYOUTS = ("half", "interleaved")
POSITIONS = ("rope", "nope", "alibi", "nape")


@dataclass
class AttentionConfig:
    """Which attention variant each layer uses, and its hyper-parameters.

    `variant`/`params` is the default for every layer; `layers` maps a layer
    index to an override `{"variant": ..., "params": {...}}` (cog, diff and
    intg are used on a subset of layers in their papers)."""

    variant: str = "softmax"
    params: dict[str, Any] = field(default_factory=dict)
    layers: dict[int, dict[str, Any]] = field(default_factory=dict)
    position: str = "rope"

    def __post_init__(self) -> None:
        self.layers = {int(k): dict(v) for k, v in self.layers.items()}
        if self.position not in POSITIONS:
            raise ConfigError(f"unknown position {self.position!r}; supported: {', '.join(POSITIONS)}")

    def for_layer(self, layer: int) -> tuple[str, dict[str, Any]]:
        """(variant name, params) for one layer, with overrides applied."""
        override = self.layers.get(layer)
        if override is None:
            return self.variant, dict(self.params)
        return override.get("variant", self.variant), dict(override.get("params", {}))

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "params": self.params,
            "layers": {str(k): v for k, v in self.layers.items()},
            "position": self.position,
        }


@dataclass
class ModelConfig:
    """A Llama-family decoder: RMSNorm, SwiGLU, RoPE, grouped-query attention."""

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
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    partial_rotary_factor: float = 1.0
    rotary_layout: str = "half"
    sliding_window: int | None = None
    attention: AttentionConfig = field(default_factory=AttentionConfig)
    bos_token_id: int | None = None
    eos_token_id: list[int] = field(default_factory=list)
    torch_dtype: str = "float32"
    source_format: str = OWN_MODEL_TYPE  # "lctx" or the HF model_type it was read from

    def __post_init__(self) -> None:
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
        if isinstance(self.eos_token_id, int):
            self.eos_token_id = [self.eos_token_id]
        self.eos_token_id = list(self.eos_token_id or [])

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

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        model_type = raw.get("model_type", OWN_MODEL_TYPE)
        if model_type == OWN_MODEL_TYPE:
            return _from_own(raw)
        if model_type in HF_MODEL_TYPES:
            return _from_hf(raw, model_type)
        raise ConfigError(
            f"unsupported model_type {model_type!r}; supported: {', '.join((OWN_MODEL_TYPE, *HF_MODEL_TYPES))}"
        )

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        path = Path(path)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise ConfigError(f"no config.json at {path}; a checkpoint directory needs config.json")
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path} is not valid JSON: {e}") from e
        if not isinstance(raw, dict):
            raise ConfigError(f"{path} must hold a JSON object")
        try:
            return cls.from_dict(raw)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from e


def _require(raw: dict[str, Any], keys: tuple[str, ...], what: str) -> None:
    missing = [k for k in keys if k not in raw]
    if missing:
        raise ConfigError(f"{what} config is missing required keys: {', '.join(missing)}")


def _rope_from_raw(raw: dict[str, Any]) -> tuple[float, RopeScaling, float]:
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


def _from_own(raw: dict[str, Any]) -> ModelConfig:
    _require(raw, ("hidden_size", "num_layers", "num_heads", "intermediate_size", "vocab_size"), "lctx")
    raw = dict(raw)
    raw.pop("model_type", None)
    theta, scaling, partial = _rope_from_raw(raw)
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


def _hf_sliding_window(raw: dict[str, Any], model_type: str) -> int | None:
    """The window every layer uses, or None. Llama has none; Mistral windows every
    layer; Qwen2 only with `use_sliding_window`, and then only layers from
    `max_window_layers` on (transformers writes that out as `layer_types`). One
    window for some layers and none for others is refused rather than run wrong."""
    window = raw.get("sliding_window")
    if model_type == "llama" or window is None:
        return None
    if model_type == "mistral":
        return window
    if not raw.get("use_sliding_window", False):
        return None
    layers = raw["num_hidden_layers"]
    kinds = raw.get("layer_types") or [
        "sliding_attention" if i >= raw.get("max_window_layers", 28) else "full_attention" for i in range(layers)
    ]
    sliding = [i for i, kind in enumerate(kinds) if kind == "sliding_attention"]
    if not sliding:
        return None
    if len(sliding) == layers:
        return window
    raise ConfigError(
        f"qwen2 config uses a sliding window of {window} on layers {sliding} only (max_window_layers / "
        "layer_types); lctx runs one window for every layer: set use_sliding_window=false to run every "
        "layer with full attention, or max_window_layers=0 to window every layer"
    )


def _from_hf(raw: dict[str, Any], model_type: str) -> ModelConfig:
    _require(
        raw,
        ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size"),
        model_type,
    )
    act = raw.get("hidden_act", "silu")
    if act != "silu":
        raise ConfigError(f"hidden_act {act!r} is not supported; Llama-family models use 'silu'")
    if raw.get("mlp_bias"):
        raise ConfigError("mlp_bias=true is not supported")
    theta, scaling, partial = _rope_from_raw(raw)
    attention_bias = bool(raw.get("attention_bias", False))
    qkv_bias = attention_bias or model_type == "qwen2"
    window = _hf_sliding_window(raw, model_type)
    dtype = raw.get("dtype") or raw.get("torch_dtype") or "float32"
    return ModelConfig(
        hidden_size=raw["hidden_size"],
        num_layers=raw["num_hidden_layers"],
        num_heads=raw["num_attention_heads"],
        num_kv_heads=raw.get("num_key_value_heads"),
        head_dim=raw.get("head_dim"),
        intermediate_size=raw["intermediate_size"],
        vocab_size=raw["vocab_size"],
        rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        qkv_bias=qkv_bias,
        o_bias=attention_bias and model_type != "qwen2",
        max_position_embeddings=raw.get("max_position_embeddings", 2048),
        rope_theta=theta,
        rope_scaling=scaling,
        partial_rotary_factor=partial,
        rotary_layout="half",
        sliding_window=window,
        bos_token_id=raw.get("bos_token_id"),
        eos_token_id=raw.get("eos_token_id") or [],
        torch_dtype=str(dtype),
        source_format=model_type,
    )
