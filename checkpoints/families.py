"""The Hugging Face families lctx loads: what each reads from its config.json
and how its weight names map to ours.

One reader per `model_type`, each a short function from the raw config to a
`ModelConfig`: the shared keys come from `_common`, the family's own options
are spelled out where they are read (the guide's families table (docs/guide/model-runtime.md) follows this
file). A key a family uses that lctx cannot honour is refused with a message
naming it; a model_type that is not here is refused with the list of those
that are. Checked against transformers' own classes in
tests/checkpoints/test_families.py."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import torch

from checkpoints.config import ACTIVATIONS, LAYER_TYPES, ModelConfig, require_keys, rope_from_raw
from checkpoints.errors import ConfigError
from checkpoints.rope import rope_method_of

REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")


def _common(raw: dict[str, Any], model_type: str, **family: Any) -> dict[str, Any]:
    """ModelConfig keyword arguments every family reads the same way, then the family's."""
    require_keys(raw, REQUIRED, model_type)
    if raw.get("use_bidirectional_attention"):
        raise ConfigError(f"{model_type} config sets use_bidirectional_attention=true (an encoder); "
                          "lctx evaluates causal decoders")
    act = raw.get("hidden_activation") or raw.get("hidden_act") or "silu"
    if act not in ACTIVATIONS:
        raise ConfigError(f"{model_type} config: hidden activation {act!r} is not supported; "
                          "lctx runs silu (SwiGLU) and gelu_pytorch_tanh (GeGLU) MLPs")
    theta, scaling, partial = rope_from_raw(raw)
    dtype = raw.get("dtype") or raw.get("torch_dtype") or "float32"
    kwargs = dict(
        hidden_size=raw["hidden_size"],
        num_layers=raw["num_hidden_layers"],
        num_heads=raw["num_attention_heads"],
        num_kv_heads=raw.get("num_key_value_heads"),
        head_dim=raw.get("head_dim"),
        intermediate_size=raw["intermediate_size"],
        vocab_size=raw["vocab_size"],
        rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        hidden_act=act,
        max_position_embeddings=raw.get("max_position_embeddings", 2048),
        rope_theta=theta,
        rope_scaling=scaling,
        partial_rotary_factor=partial,
        bos_token_id=raw.get("bos_token_id"),
        eos_token_id=raw.get("eos_token_id") or [],
        torch_dtype=str(dtype),
        source_format=model_type,
    )
    kwargs.update(family)
    return kwargs


def _attention_bias(raw: dict[str, Any]) -> dict[str, bool]:
    """`attention_bias` biases q, k, v and o (Llama, Qwen3, Gemma, OLMo 2, SmolLM3)."""
    bias = bool(raw.get("attention_bias", False))
    return dict(qkv_bias=bias, o_bias=bias)


def _layer_types(raw: dict[str, Any], default: Callable[[int], str] | None = None) -> list[str] | None:
    """The per-layer list transformers writes (`layer_types`), else the family's rule."""
    if raw.get("layer_types"):
        types, layers = list(raw["layer_types"]), raw["num_hidden_layers"]
        if len(types) != layers:
            raise ConfigError(f"layer_types lists {len(types)} layers; the model has {layers}")
        unknown = sorted(set(types) - set(LAYER_TYPES))
        if unknown:
            raise ConfigError(f"layer_types has unknown entries {unknown}; each is one of {', '.join(LAYER_TYPES)}")
        return types
    if default is None:
        return None
    return [default(i) for i in range(raw["num_hidden_layers"])]


def _windowed(raw: dict[str, Any], window: int | None, types: list[str] | None) -> dict[str, Any]:
    """`sliding_window` and `layer_types`, or neither when no layer is windowed."""
    if window is None or not types or "sliding_attention" not in types:
        return dict(sliding_window=None, layer_types=None)
    return dict(sliding_window=window, layer_types=types)


# --- the readers, one per model_type ---------------------------------------------


def llama(raw: dict[str, Any]) -> ModelConfig:
    """Llama 2/3: optional `attention_bias` (q, k, v, o), `mlp_bias`, tied embeddings, `head_dim`."""
    return ModelConfig(**_common(raw, "llama", **_attention_bias(raw), mlp_bias=bool(raw.get("mlp_bias", False))))


def mistral(raw: dict[str, Any]) -> ModelConfig:
    """Mistral: `sliding_window` on every layer (ModelConfig's default pattern), an explicit
    `head_dim` (Mistral NeMo)."""
    return ModelConfig(**_common(raw, "mistral", sliding_window=raw.get("sliding_window")))


def _qwen_windows(raw: dict[str, Any]) -> dict[str, Any]:
    """Qwen2/3: windows only with `use_sliding_window`, on layers from `max_window_layers`
    on, as transformers writes out in `layer_types`."""
    if not raw.get("use_sliding_window", False):
        return _windowed(raw, None, None)
    start = raw.get("max_window_layers", 28)
    types = _layer_types(raw, lambda i: "sliding_attention" if i >= start else "full_attention")
    return _windowed(raw, raw.get("sliding_window"), types)


def qwen2(raw: dict[str, Any]) -> ModelConfig:
    """Qwen2/2.5: q, k, v biased (o not), windows per `layer_types`."""
    return ModelConfig(**_common(raw, "qwen2", qkv_bias=True, o_bias=False, **_qwen_windows(raw)))


def qwen3(raw: dict[str, Any]) -> ModelConfig:
    """Qwen3: per-head RMSNorm of q and k before RoPE, an explicit `head_dim`, windows per `layer_types`."""
    return ModelConfig(**_common(raw, "qwen3", **_attention_bias(raw), qk_norm="head", **_qwen_windows(raw)))


def _gemma(raw: dict[str, Any], model_type: str, pattern: int, **family: Any) -> dict[str, Any]:
    """What Gemma 2 and 3 share: sandwich norms with (1 + w), GeGLU, embeddings times
    sqrt(hidden), the `query_pre_attn_scalar` scale, softcaps, local/global layers
    (`layer_types`, else every `pattern`-th layer global)."""
    require_keys(raw, REQUIRED, model_type)
    types = _layer_types(raw, lambda i: "sliding_attention" if (i + 1) % pattern else "full_attention")
    return _common(
        raw, model_type, **_attention_bias(raw),
        norm_placement="sandwich",
        norm_unit_offset=True,
        embedding_multiplier=raw["hidden_size"] ** 0.5,
        attention_scale=float(raw.get("query_pre_attn_scalar", 256)) ** -0.5,
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", True)),
        **_windowed(raw, raw.get("sliding_window", 4096), types),
        **family,
    )


def gemma2(raw: dict[str, Any]) -> ModelConfig:
    """Gemma 2: attention logit softcapping (`attn_logit_softcapping`), alternating local/global layers."""
    kwargs = _gemma(raw, "gemma2", 2, attn_logit_softcapping=raw.get("attn_logit_softcapping", 50.0),
                    final_logit_softcapping=raw.get("final_logit_softcapping", 30.0))
    return ModelConfig(**kwargs)


def gemma3_text(raw: dict[str, Any]) -> ModelConfig:
    """Gemma 3 (text): q/k norm, five local layers per global one (`sliding_window_pattern`),
    a local RoPE base (`rope_local_base_freq`, or v5 `rope_parameters.sliding_attention`)
    unscaled, the RoPE scaling on global layers only."""
    if raw.get("attn_logit_softcapping") is not None:
        raise ConfigError(
            f"gemma3_text config sets attn_logit_softcapping={raw['attn_logit_softcapping']}; Gemma 3 has no "
            "attention softcapping (transformers ignores the key), so its meaning here is unclear: set it to null"
        )
    params = raw.get("rope_parameters") or {}
    if "full_attention" in params or "sliding_attention" in params:  # v5: one dict per layer type
        full = dict(params.get("full_attention") or {})
        local = dict(params.get("sliding_attention") or {})
        full.setdefault("rope_theta", 1_000_000.0)
        raw = {**raw, "rope_parameters": full}
    else:  # v4: rope_theta / rope_scaling global, rope_local_base_freq local
        local = {"rope_type": "default", "rope_theta": raw.get("rope_local_base_freq", 10_000.0)}
        raw = {**raw, "rope_theta": raw.get("rope_theta", 1_000_000.0)}
    if rope_method_of(local).name != "default" or len(set(local) - {"rope_type", "type", "rope_theta"}):
        raise ConfigError(f"gemma3_text config: the sliding layers' RoPE {local} is scaled; lctx runs local "
                          "layers with unscaled RoPE (Gemma 3's design): keep rope_type 'default' there")
    kwargs = _gemma(raw, "gemma3_text", int(raw.get("sliding_window_pattern", 6)), qk_norm="head",
                    final_logit_softcapping=raw.get("final_logit_softcapping"),
                    rope_local_theta=float(local.get("rope_theta", 10_000.0)))
    return ModelConfig(**kwargs)


def gemma3(raw: dict[str, Any]) -> ModelConfig:
    """Gemma 3 with its vision tower: refused, its text decoder is `gemma3_text`."""
    raise ConfigError(
        "model_type 'gemma3' is Gemma 3 with its SigLIP vision tower (vision_config), which lctx does not run; "
        "it evaluates the text decoder: save that as Gemma3ForCausalLM (model_type 'gemma3_text') and load it"
    )


def phi3(raw: dict[str, Any]) -> ModelConfig:
    """Phi-3/3.5/4-mini: fused `qkv_proj` and `gate_up_proj` (split on load), LongRoPE with
    short and long factors switching at `original_max_position_embeddings`, partial rotary,
    `sliding_window` on every layer when set."""
    raw = dict(raw)
    for key in ("rope_parameters", "rope_scaling"):
        params = raw.get(key)
        # transformers' Phi-3 reads the older names "su" and "yarn" as LongRoPE.
        if params and (params.get("rope_type") or params.get("type")) in ("su", "yarn"):
            raw[key] = {**params, "rope_type": "longrope"}
            raw[key].pop("type", None)
    return ModelConfig(**_common(raw, "phi3", sliding_window=raw.get("sliding_window")))


def olmo2(raw: dict[str, Any]) -> ModelConfig:
    """OLMo 2: norms after attention and after the MLP (no pre-norms), RMSNorm of q and k
    over the whole projection."""
    return ModelConfig(**_common(raw, "olmo2", **_attention_bias(raw), norm_placement="post", qk_norm="projection"))


def smollm3(raw: dict[str, Any]) -> ModelConfig:
    """SmolLM3: no RoPE on the layers `no_rope_layers` marks 0 (else every
    `no_rope_layer_interval`-th), windows per `layer_types` with `use_sliding_window`."""
    layers = raw.get("num_hidden_layers", 0)
    interval = int(raw.get("no_rope_layer_interval", 4))
    uses_rope = raw.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(layers)]
    if len(uses_rope) != layers:
        raise ConfigError(f"smollm3 config: no_rope_layers lists {len(uses_rope)} layers; the model has {layers}")
    window = raw.get("sliding_window") if raw.get("use_sliding_window", False) else None
    attention = {"layers": {i: {"position": "nope"} for i, rope in enumerate(uses_rope) if not rope}}
    return ModelConfig(**_common(raw, "smollm3", **_attention_bias(raw), mlp_bias=bool(raw.get("mlp_bias", False)),
                                 attention=attention, **_windowed(raw, window, _layer_types(raw))))


READERS: dict[str, Callable[[dict[str, Any]], ModelConfig]] = {
    "llama": llama, "mistral": mistral, "qwen2": qwen2, "qwen3": qwen3, "gemma2": gemma2,
    "gemma3_text": gemma3_text, "gemma3": gemma3, "phi3": phi3, "olmo2": olmo2, "smollm3": smollm3,
}
HF_MODEL_TYPES = tuple(name for name in READERS if name != "gemma3")


def from_hf(raw: dict[str, Any]) -> ModelConfig:
    """The ModelConfig of a Hugging Face config.json (dispatch on `model_type`)."""
    model_type = raw.get("model_type")
    reader = READERS.get(model_type)
    if reader is None:
        raise ConfigError(
            f"unsupported model_type {model_type!r}; supported: lctx, {', '.join(HF_MODEL_TYPES)} "
            "(docs/guide/model-runtime.md's families table says what each reads)"
        )
    return reader(raw)


# --- weight names ---------------------------------------------------------------

_LAYER = r"^model\.layers\.(\d+)\."
_SHARED_NAMES: list[tuple[str, str]] = [
    (r"^model\.embed_tokens\.weight$", "embed.weight"),
    (r"^model\.norm\.weight$", "norm.weight"),
    (r"^lm_head\.weight$", "lm_head.weight"),
    (_LAYER + r"self_attn\.([qkvo])_proj\.(weight|bias)$", r"layers.\1.attn.\2_proj.\3"),
    (_LAYER + r"self_attn\.([qk])_norm\.weight$", r"layers.\1.attn.\2_norm.weight"),
    (_LAYER + r"self_attn\.qkv_proj\.weight$", r"layers.\1.attn.qkv_proj.weight"),  # Phi-3, split on load
    (_LAYER + r"mlp\.(gate|up|down)_proj\.(weight|bias)$", r"layers.\1.mlp.\2_proj.\3"),
    (_LAYER + r"mlp\.gate_up_proj\.weight$", r"layers.\1.mlp.gate_up_proj.weight"),  # Phi-3, split on load
]
# The block's norms by placement: which HF norm is which of ours.
_NORM_NAMES: dict[str, dict[str, str]] = {
    "pre": {"input_layernorm": "attn_norm", "post_attention_layernorm": "mlp_norm"},
    "sandwich": {"input_layernorm": "attn_norm", "post_attention_layernorm": "attn_post_norm",
                 "pre_feedforward_layernorm": "mlp_norm", "post_feedforward_layernorm": "mlp_post_norm"},
    "post": {"post_attention_layernorm": "attn_post_norm", "post_feedforward_layernorm": "mlp_post_norm"},
}


def hf_name_map(config: ModelConfig) -> list[tuple[str, str]]:
    """(regex, replacement) rows from a family's weight names to ours."""
    norms = [(_LAYER + rf"{hf}\.weight$", rf"layers.\1.{ours}.weight")
             for hf, ours in _NORM_NAMES[config.norm_placement].items()]
    return _SHARED_NAMES + norms


def hf_to_lctx_name(name: str, config: ModelConfig) -> str | None:
    for pattern, repl in hf_name_map(config):
        if re.match(pattern, name):
            return re.sub(pattern, repl, name)
    return None


def split_fused(state: dict[str, torch.Tensor], config: ModelConfig) -> None:
    """Phi-3's fused projections, in place: `qkv_proj` rows are q, then k, then v;
    `gate_up_proj` rows are gate, then up."""
    q_rows = config.num_heads * config.head_dim
    kv_rows = config.num_kv_heads * config.head_dim
    for name in [n for n in state if n.endswith(".qkv_proj.weight")]:
        prefix = name.removesuffix("qkv_proj.weight")
        fused = state.pop(name)
        if fused.shape[0] != q_rows + 2 * kv_rows:
            raise ConfigError(f"{name} has {fused.shape[0]} rows; q, k and v need {q_rows} + 2 x {kv_rows}")
        for part, tensor in zip("qkv", fused.split([q_rows, kv_rows, kv_rows]), strict=True):
            state[f"{prefix}{part}_proj.weight"] = tensor
    for name in [n for n in state if n.endswith(".gate_up_proj.weight")]:
        prefix = name.removesuffix("gate_up_proj.weight")
        gate, up = state.pop(name).chunk(2, dim=0)
        state[f"{prefix}gate_proj.weight"], state[f"{prefix}up_proj.weight"] = gate, up

