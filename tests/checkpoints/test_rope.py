"""RoPE scaling against transformers' own implementation (the oracle) and the
closed forms in docs/protocols/rope.md (see also the table tests at the end)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from checkpoints.config import ModelConfig, RopeScaling
from checkpoints.config_reader import read_config
from checkpoints.errors import ConfigError
from checkpoints.rope import (
    L0_KEY,
    ROPE_METHODS,
    RopeMethod,
    Rotary,
    apply_rotary,
    default_inv_freq,
    dynamic_base,
    inv_freq_and_factor,
    ntk_base,
    parse_rope_override,
)
from tests.helpers import HEAD_DIM, HF_CASES, L0, LONG, SHORT, tiny_checkpoint


def hf_config(params: dict, max_pos: int):
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=HEAD_DIM * 2, num_attention_heads=2, head_dim=HEAD_DIM, max_position_embeddings=max_pos,
        rope_parameters={"rope_theta": 10000.0, **params},
    )


@pytest.mark.parametrize("case", sorted(HF_CASES))
@pytest.mark.parametrize("length", [L0 // 2, 4 * L0 + 3])
def test_inv_freq_and_attention_factor_match_transformers(case: str, length: int) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = HF_CASES[case]
    max_pos = L0 if params["rope_type"] in ("default", "linear", "dynamic") else 4 * L0
    hf = hf_config(params, max_pos)
    kind = params["rope_type"]
    if kind == "default":
        from transformers.modeling_rope_utils import RotaryEmbeddingConfigMixin  # noqa: F401

        hf_inv = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
        hf_factor = 1.0
    else:
        hf_inv, hf_factor = ROPE_INIT_FUNCTIONS[kind](hf, "cpu", seq_len=length)
    ours = read_config(hf.to_dict())
    inv, factor = inv_freq_and_factor(
        ours.rope_scaling, HEAD_DIM, ours.rope_theta, ours.rope_l0, ours.max_position_embeddings, length
    )
    torch.testing.assert_close(inv.float(), hf_inv.float(), rtol=1e-6, atol=0)
    assert factor == pytest.approx(hf_factor, rel=1e-6)


def test_static_ntk_closed_form() -> None:
    """The numbers in docs/protocols/rope.md (dim 128, base 10000)."""
    assert ntk_base(10000, 2, 128) == pytest.approx(20221.3, abs=0.1)
    assert ntk_base(10000, 4, 128) == pytest.approx(40889.9, abs=0.1)
    assert ntk_base(10000, 8, 128) == pytest.approx(82684.6, abs=0.1)
    inv, factor = inv_freq_and_factor(RopeScaling(type="ntk", factor=4), 128, 10000, 4096, 4096)
    torch.testing.assert_close(inv, default_inv_freq(128, 40889.9), rtol=1e-5, atol=0)
    assert factor == 1.0


def test_dynamic_ntk_closed_form() -> None:
    assert dynamic_base(10000, 2, 128, 4096, 4096) == pytest.approx(10000.0)
    assert dynamic_base(10000, 2, 128, 2000, 4096) == pytest.approx(10000.0)
    assert dynamic_base(10000, 2, 128, 8192, 4096) == pytest.approx(30527.7, abs=0.1)
    # 10000 * 7^(128/126) = 72195.86; the reference page rounds it to 72195.7.
    assert dynamic_base(10000, 2, 128, 16384, 4096) == pytest.approx(72195.7, rel=5e-6)


def test_yarn_llama2_worked_example() -> None:
    """docs/protocols/rope.md: Llama-2-7B, low 20, high 46; attention factor 1.2773 at s=16, 1.3466 at s=32."""
    for s, expected in ((16, 1.2773), (32, 1.3466)):
        inv, factor = inv_freq_and_factor(RopeScaling(type="yarn", factor=s), 128, 1e4, 4096, 4096)
        assert factor == pytest.approx(expected, abs=1e-4)
        base = default_inv_freq(128, 1e4)
        torch.testing.assert_close(inv[:21], base[:21])  # pairs 0-20 unchanged
        torch.testing.assert_close(inv[46:], base[46:] / s)  # pairs 46-63 fully interpolated
        assert (inv[21:46] < base[21:46]).all() and (inv[21:46] > base[21:46] / s).all()


def test_partial_rotary_passes_tail_through() -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=64, num_layers=1, num_heads=2, intermediate_size=8, vocab_size=8,
                      partial_rotary_factor=0.5)
    rot = Rotary(cfg)
    x = torch.randn(1, 2, 5, 32)
    cos, sin = rot.cos_sin(torch.arange(5), cfg.rotary_dim, x.dtype)
    y = apply_rotary(x, cos, sin, interleaved=False)
    torch.testing.assert_close(y[..., 16:], x[..., 16:])
    full = apply_rotary(x[..., :16], cos, sin, interleaved=False)
    torch.testing.assert_close(y[..., :16], full)
    # rotation preserves the norm of every channel pair
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))


def test_interleaved_layout_is_half_layout_on_permuted_channels() -> None:
    torch.manual_seed(0)
    dim = 16
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=8, vocab_size=8)
    rot = Rotary(cfg)
    x = torch.randn(1, 1, 7, dim)
    pos = torch.arange(3, 10)
    cos_h, sin_h = rot.cos_sin(pos, dim, x.dtype)
    rot.interleaved = True
    cos_i, sin_i = rot.cos_sin(pos, dim, x.dtype)
    perm = torch.cat([torch.arange(0, dim, 2), torch.arange(1, dim, 2)])  # evens then odds
    y_inter = apply_rotary(x, cos_i, sin_i, interleaved=True)
    y_half = apply_rotary(x[..., perm], cos_h, sin_h, interleaved=False)
    torch.testing.assert_close(y_inter[..., perm], y_half)


def test_override_strings_and_dicts() -> None:
    cfg = ModelConfig(hidden_size=64, num_layers=1, num_heads=2, intermediate_size=8, vocab_size=8,
                      max_position_embeddings=2048)
    yarn = parse_rope_override("yarn:4", cfg)
    assert (yarn.type, yarn.factor, yarn.original_max_position_embeddings) == ("yarn", 4.0, 2048)
    ntk = parse_rope_override("ntk:8", cfg)
    assert (ntk.type, ntk.factor) == ("ntk", 8.0)
    as_dict = parse_rope_override({"type": "linear", "factor": 2}, cfg)
    assert (as_dict.type, as_dict.factor) == ("linear", 2.0)
    assert parse_rope_override("none", cfg).type == "default"
    assert parse_rope_override(None, cfg) is cfg.rope_scaling


@pytest.mark.parametrize(
    "value, message",
    [
        ("spiral:4", "unknown rope type 'spiral'; supported rope types: default, linear, ntk, dynamic, yarn"),
        ("yarn:0.5", "factor must be >= 1"),
        ("yarn", "needs a factor, for example 'yarn:4'"),
        ("yarn:abc", "factor 'abc' is not a finite number"),
        ("yarn:\u0664", "factor '\u0664' is not a finite number written in ASCII digits"),  # an Arabic-Indic four
        ("yarn:1_0", "factor '1_0' is not a finite number"),
        ("ntk:inf", "factor 'inf' is not a finite number"),
        ({"rope_type": "yarn", "factor": 2, "betafast": 3}, "unknown rope scaling keys ['betafast']"),
        ({"rope_type": "default", "rope_theta": 0}, "rope_theta must be > 0"),
        ({"rope_type": "default", "rope_theta": -1}, "rope_theta must be > 0"),
        ({"rope_type": "yarn", "factor": 2, "rope_theta": math.nan}, "rope_theta must be a finite number"),
        ({"rope_type": "default", "rope_theta": "20000"}, "rope_theta must be a number"),
    ],
)
def test_bad_overrides_are_clear_errors(value, message: str) -> None:
    cfg = ModelConfig(hidden_size=64, num_layers=1, num_heads=2, intermediate_size=8, vocab_size=8)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_rope_override(value, cfg)


def test_dynamic_base_is_kept_from_prefill_for_generated_tokens() -> None:
    cfg = ModelConfig(hidden_size=64, num_layers=1, num_heads=2, intermediate_size=8, vocab_size=8,
                      max_position_embeddings=16, rope_scaling=RopeScaling(type="dynamic", factor=2.0))
    rot = Rotary(cfg)
    rot.set_length(40)
    inv40, _ = rot.inv_freq(32)
    expected = default_inv_freq(32, dynamic_base(10000.0, 2.0, 32, 40, 16))
    torch.testing.assert_close(inv40, expected)
    assert not math.isclose(float(inv40[1]), float(default_inv_freq(32, 10000.0)[1]))


@pytest.mark.parametrize("update, kept", [("prefill", True), ("step", False)])
def test_dynamic_base_from_prefill_is_kept_while_generating(update: str, kept: bool) -> None:
    """Default: the base set from the whole (chunked) prompt stays for every generated
    token; "step" recomputes it from the growing length, as transformers does."""
    from checkpoints.generate import greedy_generate
    from checkpoints.model import Decoder
    from checkpoints.tokenizer import ByteTokenizer

    torch.manual_seed(0)
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=16, vocab_size=259,
                      max_position_embeddings=16,
                      rope_scaling=RopeScaling(type="dynamic", factor=2.0, dynamic_update=update))
    model = Decoder(cfg).eval()
    prompt = list(range(40))
    out = greedy_generate(model, ByteTokenizer(), prompt, 6, stop_at_eos=False, chunk_size=16)
    assert len(out.token_ids) == 6
    # The last generated token is never fed back, so the longest sequence run is 40 + 5.
    assert model.rotary.length == (40 if kept else 45)
    inv, _ = model.rotary.inv_freq(cfg.rotary_dim)
    expected_len = 40 if kept else 45
    torch.testing.assert_close(inv, default_inv_freq(16, dynamic_base(10000.0, 2.0, 16, expected_len, 16)))


# --- the table of methods is the only place a method's name means anything ---


def _dict_override(method: RopeMethod) -> dict:
    """A valid dict override for any row: a factor if it uses one, longrope's lists."""
    raw: dict = {"rope_type": method.name}
    if method.uses_factor:
        raw["factor"] = 2.0
    if "long_factor" in method.keys:
        raw.update(long_factor=LONG, short_factor=SHORT)
    return raw


@pytest.mark.parametrize("name", list(ROPE_METHODS))
def test_every_method_in_the_table_parses_validates_and_claims_a_context(name: str) -> None:
    method = ROPE_METHODS[name]
    cfg = ModelConfig(hidden_size=64, num_layers=1, num_heads=2, intermediate_size=8, vocab_size=8,
                      max_position_embeddings=256)
    scaling = parse_rope_override(_dict_override(method), cfg)
    assert scaling.type == name and scaling.method is method
    assert scaling.original_max_position_embeddings == (256 if method.takes_original_length else None)
    assert RopeScaling.from_dict(scaling.to_dict()) == scaling
    scaled = cfg.with_rope(scaling)
    assert scaled.effective_context == (512 if method.needs_factor else 256)
    inv, factor = inv_freq_and_factor(scaling, HEAD_DIM, 1e4, scaled.rope_l0, 256, 1000)
    assert inv.shape == (HEAD_DIM // 2,) and inv.dtype == torch.float64 and factor > 0
    if method.uses_factor:
        with pytest.raises(ConfigError, match=f"needs a factor, for example '{name}:4'"):
            parse_rope_override(name, cfg)
    else:
        assert parse_rope_override(name, cfg).type == name


def test_the_unknown_method_error_lists_the_table() -> None:
    with pytest.raises(ConfigError) as err:
        RopeScaling(type="spiral")
    assert str(err.value) == f"unknown rope type 'spiral'; supported rope types: {', '.join(ROPE_METHODS)}"


def test_every_scaling_key_belongs_to_a_row() -> None:
    """RopeScaling's fields beyond type, factor and L0 are exactly the keys the rows read."""
    fields = {f.name for f in dataclasses.fields(RopeScaling)} - {"type", "factor", L0_KEY}
    declared = {key for method in ROPE_METHODS.values() for key in method.keys}
    assert declared == fields
    for method in ROPE_METHODS.values():
        assert set(method.records) <= set(method.keys)


def test_phi3_su_alias_reads_as_longrope() -> None:
    """'su' names the longrope row, so its config rules apply: top-level L0, derived factor."""
    raw = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
           "intermediate_size": 8, "vocab_size": 8, "max_position_embeddings": 4 * L0,
           "original_max_position_embeddings": L0,
           "rope_scaling": {"type": "su", "long_factor": LONG, "short_factor": SHORT}}
    s = read_config(raw).rope_scaling
    assert (s.type, s.original_max_position_embeddings, s.factor) == ("longrope", L0, 4.0)


def _toy_freq(s: RopeScaling, dim: int, base: float, l0: int, length: int) -> torch.Tensor:
    """A made-up method: interpolate by the factor times (length / L0) beyond L0."""
    return default_inv_freq(dim, base) / (s.factor * max(1.0, length / l0))


TOY = RopeMethod("toy", _toy_freq, lambda s, l0, max_pos: 0.5, needs_factor=True, original_length="scaling",
                 length_key=lambda length, l0: max(length, l0), length_update=lambda s: "step")


def test_a_new_method_is_one_function_and_one_row(monkeypatch) -> None:
    """Registering a row is all it takes: overrides, validation, configs, the effective
    context, Rotary and the decoder's per-step length update follow."""
    from checkpoints.model import Decoder

    monkeypatch.setitem(ROPE_METHODS, "toy", TOY)
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=16, vocab_size=259,
                      max_position_embeddings=16)
    scaling = parse_rope_override("toy:2", cfg)
    assert (scaling.type, scaling.factor, scaling.original_max_position_embeddings) == ("toy", 2.0, 16)
    with pytest.raises(ConfigError, match="factor must be >= 1 for 'toy'"):
        parse_rope_override("toy:0.5", cfg)
    with pytest.raises(ConfigError, match="needs a factor, for example 'toy:4'"):
        parse_rope_override("toy", cfg)
    with pytest.raises(ConfigError, match="supported rope types: .*, longrope, toy"):
        parse_rope_override("spiral:2", cfg)
    scaled = read_config(cfg.with_rope(scaling).to_dict())
    assert scaled.rope_scaling == scaling and scaled.effective_context == 32

    torch.manual_seed(0)
    model = Decoder(scaled).eval()
    cache = model.new_cache()
    with torch.no_grad():
        model(torch.arange(40)[None], cache)
        assert model.rotary.length == 40
        inv, factor = model.rotary.inv_freq(scaled.rotary_dim)
        torch.testing.assert_close(inv, default_inv_freq(16, 1e4) / (2 * 40 / 16))
        assert factor == 0.5
        model(torch.tensor([[1]]), cache)  # "step": the decode step moves the length on
        assert model.rotary.length == 41


def test_a_rope_theta_override_is_the_base_that_runs(tmp_path) -> None:
    """`{"rope_type": "default", "rope_theta": 20000}` on a checkpoint of base 10000 runs what
    the same weights saved with base 20000 run, and records that base."""
    import json
    import shutil

    from checkpoints.loading import load_model

    own = tiny_checkpoint(tmp_path / "own")
    other = tmp_path / "other"
    shutil.copytree(own, other)
    cfg = json.loads((other / "config.json").read_text())
    assert cfg["rope_parameters"]["rope_theta"] == 10000.0
    cfg["rope_parameters"]["rope_theta"] = 20000.0
    (other / "config.json").write_text(json.dumps(cfg))
    ids = torch.arange(3, 40)[None]

    def run(path, rope=None) -> tuple[torch.Tensor, float]:
        loaded = load_model(path, rope=rope)
        with torch.no_grad():
            return loaded.model(ids)[0], loaded.describe()["rope"]["rope_theta"]

    overridden, theta = run(own, {"rope_type": "default", "rope_theta": 20000})
    saved, saved_theta = run(other)
    plain, plain_theta = run(own)
    assert theta == saved_theta == 20000.0 and plain_theta == 10000.0
    torch.testing.assert_close(overridden, saved, rtol=0, atol=0)
    assert not torch.allclose(overridden, plain)


def test_longrope_factor_lists_are_checked_against_the_model() -> None:
    """One factor per rotated pair: a config or an override with lists of another size is
    refused when the config is built, not when the first prompt runs."""
    from checkpoints.config import apply_rope_override

    cfg = ModelConfig(hidden_size=64, num_layers=1, num_heads=4, intermediate_size=8, vocab_size=8,
                      max_position_embeddings=4 * L0)  # head_dim 16: 8 factors per list
    with pytest.raises(ConfigError, match="long_factor has 16 entries.*dim/2 = 8"):
        apply_rope_override(HF_CASES["longrope"], cfg)
    fits = apply_rope_override({**HF_CASES["longrope"], "long_factor": LONG[:8], "short_factor": SHORT[:8]}, cfg)
    assert fits.rope_scaling.type == "longrope" and fits.rope_theta == cfg.rope_theta
    partial = dataclasses.replace(cfg, head_dim=32, partial_rotary_factor=0.5)  # rotates 16 of 32: 8 again
    assert apply_rope_override(HF_CASES["longrope"] | {"long_factor": LONG[:8], "short_factor": SHORT[:8]},
                               partial).rotary_dim == 16
    with pytest.raises(ConfigError, match="short_factor has 4 entries"):
        ModelConfig(hidden_size=64, num_layers=1, num_heads=4, intermediate_size=8, vocab_size=8,
                    rope_scaling=RopeScaling(type="longrope", long_factor=LONG[:8], short_factor=SHORT[:4],
                                             original_max_position_embeddings=L0))
