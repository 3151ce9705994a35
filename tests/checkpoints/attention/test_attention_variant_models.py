"""Every registered attention variant in a tiny model: save, load (every
learnable parameter round-trips through safetensors under a stable name) and
generate; tda and softpick models give the same logits on the torch and
Triton (interpreted on CPU) backends."""

from __future__ import annotations

import pytest
import torch

from checkpoints.attention.registry import available_variants
from checkpoints.generate import greedy_generate
from checkpoints.loading import load_model, save_model
from checkpoints.tokenizer import ByteTokenizer
from tests.helpers import other_family_variants
from tests.helpers import variant_model as _model

# Parameters a variant must declare beyond Llama's q/k/v/o projections (checked when listed).
EXTRA = {
    "softpick": set(),
    "tra": {"beta"},
    "tda": {"beta", "lam", "q2_proj.weight", "k2_proj.weight"},
    "rela": {"norm_scale", "norm_gate"},
    "entmax": set(),
}


@pytest.mark.parametrize("variant", available_variants())
def test_every_variant_saves_loads_and_generates(variant, tmp_path):
    model = _model(variant)
    names = {n.split(".attn.", 1)[1] for n, _ in model.named_parameters() if n.startswith("layers.0.attn.")}
    assert EXTRA.get(variant, set()) <= names
    tok = ByteTokenizer()
    save_model(model, tmp_path, tok)
    loaded = load_model(tmp_path, backend="torch")
    assert loaded.config.attention.variant == variant
    state = loaded.model.state_dict()
    for name, p in model.state_dict().items():
        assert torch.equal(p, state[name]), name
    ids = tok.encode("long context")
    gen = greedy_generate(loaded.model, loaded.tokenizer, ids, max_new_tokens=4, stop_at_eos=False)
    assert len(gen.token_ids) == 4
    model.backend = "reference"
    assert greedy_generate(model, tok, ids, max_new_tokens=4, stop_at_eos=False).token_ids == gen.token_ids


@pytest.mark.parametrize("variant,params", [("softpick", {}), ("tda", {"learn_gain": True, "beta_per_head": True})])
def test_torch_and_triton_backends_give_the_same_logits(variant, params):
    pytest.importorskip("triton", reason="triton is not installed")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = _model(variant, params, seed=1).to(device)
    ids = torch.randint(0, 259, (1, 40), generator=torch.Generator().manual_seed(2)).to(device)
    logits = {}
    for backend in ("torch", "triton"):
        model.backend = backend
        cache = model.new_cache()
        with torch.no_grad():
            first, _ = model(ids[:, :30], cache)
            second, _ = model(ids[:, 30:37], cache)
            steps = [model(ids[:, t:t + 1], cache)[0] for t in range(37, 40)]
        logits[backend] = torch.cat([first, second, *steps], dim=1)
    scale = logits["torch"].abs().max()
    err = (logits["triton"] - logits["torch"]).abs().max()
    assert err <= 1e-5 * scale, f"max abs logit difference {err:.3g} (scale {scale:.3g})"


# Relative RMS error of the logits against the fp32 reference path, per dtype: the bounds of
# docs/protocols/attention.md's half-precision rule, at model level (weights and activations
# rounded too, so looser than the kernels' own 0.005).
HALF_BOUNDS = {torch.bfloat16: 0.03, torch.float16: 0.005}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16/fp16 Triton models are checked on a GPU only")
@pytest.mark.parametrize("dtype", list(HALF_BOUNDS), ids=str)
@pytest.mark.parametrize("variant", available_variants())
def test_half_precision_models_on_gpu(variant, dtype):
    """Every variant's model in bf16/fp16 on the Triton backend, prefill in two chunks and three
    decode steps, against the same weights in fp32 on the reference path."""
    model = _model(variant, seed=1).cuda()
    ids = torch.randint(0, 259, (1, 300), generator=torch.Generator().manual_seed(2)).cuda()

    def logits(m):
        cache = m.new_cache()
        with torch.no_grad():
            parts = [m(ids[:, :200], cache)[0], m(ids[:, 200:297], cache)[0]]
            parts += [m(ids[:, t:t + 1], cache)[0] for t in range(297, 300)]
        return torch.cat(parts, dim=1).float()

    model.backend = "reference"
    ref = logits(model)
    half = model.to(dtype)
    half.backend = "triton"
    got = logits(half)
    rel = ((got - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()
    print(f"{variant} {dtype}: relative RMS logit error {rel:.2e}")
    assert rel < HALF_BOUNDS[dtype], rel


@pytest.mark.parametrize("variant", other_family_variants())
def test_weights_and_statistics_through_the_model(variant):
    """`return_weights` gives each layer's dense (B, Hq, T, S) weights and
    `collect_stats` the same statistics from the streaming path."""
    model = _model(variant)
    ids = torch.randint(0, 259, (1, 20), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        _, ctx = model(ids, return_weights=True, collect_stats=True)
        model.backend = "torch"
        _, streamed = model(ids, collect_stats=True)
    assert [w.shape for w in ctx.weights] == [(1, 4, 20, 20)] * 2
    assert all((w.triu(1) == 0).all() for w in ctx.weights)  # causal
    if variant == "entmax":
        torch.testing.assert_close(ctx.weights[0].sum(-1), torch.ones(1, 4, 20), rtol=0, atol=1e-5)
    for dense, stream in zip(ctx.stats, streamed.stats, strict=True):
        assert dense.layer == stream.layer
        torch.testing.assert_close(stream.abs_sum, dense.abs_sum, rtol=1e-5, atol=1e-5)
        assert torch.equal(stream.zeros, dense.zeros)
