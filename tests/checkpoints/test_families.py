"""The Hugging Face families against transformers' own classes: tiny random
models saved with `save_pretrained`, prompts longer than the original context,
logits within 1e-4 (fp32) and 20 greedy tokens identical, through the Python
API and through `lctx generate`, with the checkpoint's RoPE and with the same
RoPE given as a job's override on a copy saved without it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from checkpoints.config_reader import read_config
from checkpoints.errors import ConfigError, LoadError
from checkpoints.generate import greedy_generate
from checkpoints.loading import load_model, save_model
from checkpoints.model import Decoder
from cli.main import main as lctx
from tests.checkpoints.hf_models import VOCAB, build_hf_model
from tests.helpers import L0

pytestmark = pytest.mark.integration  # transformers builds and runs each family's tiny model

PROMPT_LEN = 3 * L0 // 2 + 5  # longer than the original context, and than every window
WINDOW = 16
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": L0}
LONGROPE = {"rope_type": "longrope", "short_factor": [1.0, 1.1, 1.3, 1.6],
            "long_factor": [1.0, 2.0, 4.0, 8.0]}
GEMMA3_LOCAL = {"rope_type": "default", "rope_theta": 100.0}

# name -> (model_type, config overrides, the RoPE the oracle is saved with, that RoPE as a job override)
CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any], Any]] = {
    "qwen3": ("qwen3", dict(head_dim=24, num_hidden_layers=3, use_sliding_window=True, sliding_window=WINDOW,
                            max_window_layers=1), YARN, "yarn:4"),
    "gemma2": ("gemma2", dict(head_dim=16, num_hidden_layers=4, query_pre_attn_scalar=24, sliding_window=WINDOW,
                              attn_logit_softcapping=4.0, final_logit_softcapping=8.0),
               {"rope_type": "linear", "factor": 4.0}, "linear:4"),
    "gemma3_text": ("gemma3_text", dict(head_dim=16, num_hidden_layers=4, query_pre_attn_scalar=24,
                                        sliding_window=WINDOW, final_logit_softcapping=8.0,
                                        layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                                     "sliding_attention"]),
                    {"full_attention": {"rope_theta": 10000.0, **YARN}, "sliding_attention": GEMMA3_LOCAL},
                    "yarn:4"),
    "phi3": ("phi3", dict(partial_rotary_factor=0.5, original_max_position_embeddings=L0), LONGROPE,
             {**LONGROPE, "factor": 4.0}),  # an override states the extension the config's lengths imply
    "phi3_window": ("phi3", dict(sliding_window=WINDOW), {"rope_type": "default"}, None),
    "olmo2": ("olmo2", dict(), {"rope_type": "linear", "factor": 4.0}, "linear:4"),
    "smollm3": ("smollm3", dict(num_hidden_layers=4, tie_word_embeddings=True), YARN, "yarn:4"),
    "mistral_head_dim": ("mistral", dict(head_dim=24, sliding_window=WINDOW), YARN, "yarn:4"),
    "llama_biases_tied": ("llama", dict(attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
                          {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": L0}, None),
    "qwen2_windows_on_some_layers": ("qwen2", dict(num_hidden_layers=3, use_sliding_window=True,
                                                   sliding_window=WINDOW, max_window_layers=1), YARN, "yarn:4"),
}


def _prompt(seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (1, PROMPT_LEN), generator=g)


def _build(path: Path, case: str):
    model_type, overrides, rope, _ = CASES[case]
    return build_hf_model(path, model_type, rope_parameters=rope, max_position_embeddings=4 * L0, **overrides)


def _hf_greedy(hf, ids: torch.Tensor, eos: int | None = None) -> list[int]:
    out = hf.generate(ids, max_new_tokens=20, do_sample=False, eos_token_id=eos, pad_token_id=0,
                      min_new_tokens=0 if eos is not None else 20)[0, ids.shape[1]:].tolist()
    return out[: out.index(eos)] if eos is not None and eos in out else out


def _without_rope(src: Path, dst: Path) -> Path:
    """A copy of an HF checkpoint whose config has no RoPE scaling, at the original context."""
    shutil.copytree(src, dst)
    raw = json.loads((dst / "config.json").read_text())
    params = raw["rope_parameters"]
    if "full_attention" in params:
        params["full_attention"] = {"rope_type": "default", "rope_theta": params["full_attention"]["rope_theta"]}
    else:
        keep = {k: params[k] for k in ("rope_theta", "partial_rotary_factor") if k in params}
        raw["rope_parameters"] = {"rope_type": "default", **keep}
    raw["max_position_embeddings"] = L0
    raw.pop("original_max_position_embeddings", None)
    (dst / "config.json").write_text(json.dumps(raw))
    return dst


def _cli_generate(capsys, checkpoint: Path, prompt: str, rope: Any = None) -> str:
    args = ["generate", "--checkpoint", str(checkpoint), "--prompt", prompt, "--max-new-tokens", "20"]
    if rope is not None:
        args += ["--rope", rope if isinstance(rope, str) else json.dumps(rope)]
    capsys.readouterr()
    assert lctx(args) == 0
    return capsys.readouterr().out.strip()


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_and_greedy_tokens_match_transformers(tmp_path, case: str) -> None:
    hf = _build(tmp_path, case)
    ours = load_model(tmp_path)
    assert ours.config.source_format == CASES[case][0]
    ids = _prompt()
    with torch.no_grad():
        ref = hf(ids).logits
        got, _ = ours.model(ids)
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-4)
    gen = greedy_generate(ours.model, ours.tokenizer, ids[0].tolist(), 20, stop_at_eos=False, chunk_size=17)
    assert gen.token_ids == _hf_greedy(hf, ids)


@pytest.mark.parametrize("case", sorted(c for c in CASES if CASES[c][3] is not None))
def test_lctx_generate_with_and_without_a_rope_override(tmp_path, capsys, case: str) -> None:
    """`lctx generate` on the checkpoint equals transformers; on a copy saved without the
    RoPE scaling, `--rope` (the job's override) brings back the same tokens and logits."""
    hf = _build(tmp_path / "hf", case)
    plain = _without_rope(tmp_path / "hf", tmp_path / "plain")
    ids = _prompt(2)
    tok = load_model(tmp_path / "hf").tokenizer
    prompt = tok.decode(ids[0].tolist())
    assert tok.encode(prompt) == ids[0].tolist()
    expected = tok.decode(_hf_greedy(hf, ids, eos=2))
    assert _cli_generate(capsys, tmp_path / "hf", prompt) == expected
    override = CASES[case][3]
    assert _cli_generate(capsys, plain, prompt, override) == expected
    with torch.no_grad():
        got, _ = load_model(plain, rope=override).model(ids)
        unscaled, _ = load_model(plain).model(ids)
        ref = hf(ids).logits
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-4)
    assert (unscaled - ref).abs().max() > 1e-2, "the scaling should matter at this prompt length"


def test_own_format_keeps_the_per_layer_pattern(tmp_path) -> None:
    """Saved in our format, a Gemma 3 and a SmolLM3 say per layer what they do, and reload equal."""
    for case in ("gemma3_text", "smollm3"):
        _build(tmp_path / case, case)
        loaded = load_model(tmp_path / case)
        save_model(loaded.model, tmp_path / f"{case}-lctx", loaded.tokenizer)
        saved = json.loads((tmp_path / f"{case}-lctx" / "config.json").read_text())
        again = load_model(tmp_path / f"{case}-lctx")
        ids = _prompt(3)
        with torch.no_grad():
            torch.testing.assert_close(again.model(ids)[0], loaded.model(ids)[0], rtol=0, atol=0)
        if case == "gemma3_text":
            assert saved["layer_types"] == CASES[case][1]["layer_types"]
            assert saved["rope_local_theta"] == 100.0 and saved["sliding_window"] == WINDOW
            assert saved["norm_placement"] == "sandwich" and saved["qk_norm"] == "head"
            assert saved["rope_parameters"]["rope_type"] == "yarn"
        else:
            assert saved["attention"]["layers"] == {"3": {"position": "nope"}}


@pytest.mark.parametrize("case", ["gemma2", "gemma3_text", "qwen3"])
def test_every_backend_and_batched_decoding_agree(tmp_path, case: str) -> None:
    """Windows, softcaps and the local RoPE on the reference, chunked and Triton (interpreted)
    paths, and the engine's ragged batched decode equal to one-at-a-time decoding."""
    from checkpoints.engine import Engine, GenerateRequest

    _build(tmp_path, case)
    ids = _prompt(4)
    logits = {}
    for backend in ("reference", "torch", "triton"):
        loaded = load_model(tmp_path, backend=backend)
        loaded.model.block_size = 32  # several key blocks per window edge on the chunked path
        with torch.no_grad():
            logits[backend], _ = loaded.model(ids)
    torch.testing.assert_close(logits["torch"], logits["reference"], rtol=0, atol=1e-4)
    torch.testing.assert_close(logits["triton"], logits["reference"], rtol=0, atol=1e-4)

    loaded = load_model(tmp_path, backend="torch")
    prompts = [ids[0, :n].tolist() for n in (PROMPT_LEN, 40, 9)]
    one_by_one = [greedy_generate(loaded.model, loaded.tokenizer, p, 12, stop_at_eos=False).token_ids
                  for p in prompts]
    engine = Engine(loaded.model, loaded.tokenizer)
    batched = engine.generate_until([GenerateRequest(p, 12, stop_at_eos=False) for p in prompts])
    assert [r.token_ids for r in batched] == one_by_one


def test_attention_variants_stay_available_on_a_family(tmp_path) -> None:
    """A Qwen3 checkpoint in our format with softpick on one layer: the variant runs
    there, with the family's q/k norm and windows, the same on every torch backend."""
    _build(tmp_path / "hf", "qwen3")
    loaded = load_model(tmp_path / "hf")
    loaded.config.attention.layers[0] = {"variant": "softpick"}  # layer 0 is a full-attention layer
    save_model(loaded.model, tmp_path / "mixed", loaded.tokenizer)
    raw = json.loads((tmp_path / "mixed" / "config.json").read_text())
    raw["attention"]["layers"] = {"0": {"variant": "softpick"}}
    (tmp_path / "mixed" / "config.json").write_text(json.dumps(raw))
    ids = _prompt(5)
    outs = {}
    for backend in ("reference", "torch"):
        mixed = load_model(tmp_path / "mixed", backend=backend)
        assert mixed.model.layers[0].attn.variant == "softpick" and mixed.model.layers[1].attn.variant == "softmax"
        with torch.no_grad():
            outs[backend], _ = mixed.model(ids)
    torch.testing.assert_close(outs["torch"], outs["reference"], rtol=0, atol=1e-4)
    with torch.no_grad():
        assert (outs["torch"] - loaded.model(ids)[0]).abs().max() > 1e-3


# --- refused, each with a message naming what ----------------------------------


def _hf_config(case: str, tmp_path: Path, **changes: Any) -> Path:
    _build(tmp_path, case)
    raw = json.loads((tmp_path / "config.json").read_text())
    raw.update(changes)
    (tmp_path / "config.json").write_text(json.dumps(raw))
    return tmp_path


@pytest.mark.parametrize("case, changes, message", [
    ("gemma3_text", {"model_type": "gemma3", "vision_config": {"model_type": "siglip_vision_model"}},
     r"model_type 'gemma3' is Gemma 3 with its SigLIP vision tower \(vision_config\)"),
    ("qwen3", {"model_type": "qwen3_moe"}, r"unsupported model_type 'qwen3_moe'; supported: lctx, llama, .*qwen3"),
    ("gemma3_text", {"attn_logit_softcapping": 50.0}, r"attn_logit_softcapping=50.0; Gemma 3 has no attention softcap"),
    ("gemma3_text", {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                         "sliding_attention": {"rope_type": "linear", "factor": 2.0}}},
     r"the sliding layers' RoPE .* is scaled"),
    ("gemma2", {"hidden_activation": "gelu"}, r"hidden activation 'gelu' is not supported"),
    ("gemma2", {"use_bidirectional_attention": True}, r"use_bidirectional_attention=true"),
    ("smollm3", {"no_rope_layers": [1, 1]}, r"no_rope_layers lists 2 layers; the model has 4"),
    ("qwen3", {"layer_types": ["full_attention"]}, r"layer_types lists 1 layers; the model has 3"),
    ("qwen3", {"layer_types": ["full_attention", "chunked_attention", "sliding_attention"]},
     r"layer_types has unknown entries \['chunked_attention'\]"),
])
def test_unsupported_features_are_refused_by_name(tmp_path, case, changes, message) -> None:
    path = _hf_config(case, tmp_path, **changes)
    with pytest.raises(ConfigError, match=message):
        load_model(path)


def test_variants_without_a_form_for_a_layer_are_refused(tmp_path) -> None:
    _build(tmp_path / "gemma2", "gemma2")
    loaded = load_model(tmp_path / "gemma2")
    raw = loaded.config.to_dict()
    softcapped = read_config({**raw, "attention": {**raw["attention"], "layers": {"1": {"variant": "softpick"}}}})
    with pytest.raises(ConfigError, match=r"'softpick' \(layer 1\) has no form with attention logit softcapping"):
        Decoder(softcapped)  # the config is fine; the layer is not
    _build(tmp_path / "qwen3", "qwen3")
    raw = load_model(tmp_path / "qwen3").config.to_dict()
    windowed = {**raw, "attention": {**raw["attention"], "layers": {"1": {"variant": "tra"}}}}
    with pytest.raises(ConfigError, match=r"'tra' \(layer 1\) has no sliding-window form"):
        Decoder(read_config(windowed))
    normed = {**raw, "attention": {**raw["attention"], "layers": {"0": {"variant": "tda"}}}}
    with pytest.raises(ConfigError, match=r"'tda' \(layer 0\) normalises q and k itself"):
        Decoder(read_config(normed))


def test_fused_projection_of_the_wrong_size_is_refused(tmp_path) -> None:
    from safetensors.torch import load_file, save_file

    _build(tmp_path, "phi3")
    state = load_file(str(tmp_path / "model.safetensors"))
    name = "model.layers.0.self_attn.qkv_proj.weight"
    state[name] = state[name][:-8]
    save_file(state, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises((ConfigError, LoadError), match=r"qkv_proj.weight has 120 rows; q, k and v need 64 \+ 2 x 32"):
        load_model(tmp_path)
