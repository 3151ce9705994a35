"""Models built from the softmax-family variants: save, load (safetensors, every
learnable parameter round-trips under a stable name), generate, and agree
across the reference, torch and Triton backends."""

from __future__ import annotations

import pytest
import torch

from checkpoints.config import AttentionConfig, ModelConfig
from checkpoints.generate import greedy_generate
from checkpoints.loading import load_model, save_model
from checkpoints.model import Decoder
from checkpoints.tokenizer import ByteTokenizer

EXTRA_PARAMS = {
    "softmax": set(),
    "ssmax": {"ssmax_s"},
    "gated": {"gate_proj.weight"},
    "cog": set(),
    "intg": set(),
    "diff": {"lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2", "norm_weight"},
}


def _config(variant: str, position: str = "rope") -> ModelConfig:
    # cog, intg and diff are used on a subset of layers in their papers: layer 1 of 2 here.
    if variant in ("cog", "intg", "diff"):
        params = {"signals": 4} if variant == "intg" else {}
        attention = AttentionConfig(layers={1: {"variant": variant, "params": params}}, position=position)
    else:
        attention = AttentionConfig(variant=variant, position=position)
    return ModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128,
                       vocab_size=259, attention=attention)


@pytest.mark.parametrize("variant", list(EXTRA_PARAMS))
def test_save_load_generate(variant, tmp_path):
    torch.manual_seed(0)
    model = Decoder(_config(variant)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("ssmax_s", "norm_weight")):
                p.uniform_(0.5, 1.5)
    names = {n.split(".attn.", 1)[1] for n, _ in model.named_parameters() if n.startswith("layers.1.attn.")}
    assert EXTRA_PARAMS[variant] <= names
    tok = ByteTokenizer()
    save_model(model, tmp_path, tok)
    loaded = load_model(tmp_path, backend="torch")
    for name, p in model.state_dict().items():
        assert torch.equal(p, loaded.model.state_dict()[name]), name
    assert type(loaded.model.layers[1].attn) is type(model.layers[1].attn)
    ids = tok.encode("hello attention")
    gen = greedy_generate(loaded.model, loaded.tokenizer, ids, max_new_tokens=5, stop_at_eos=False)
    assert len(gen.token_ids) == 5
    model.backend = "reference"
    again = greedy_generate(model, tok, ids, max_new_tokens=5, stop_at_eos=False)
    assert again.token_ids == gen.token_ids


@pytest.mark.parametrize("variant,position", [(v, "rope") for v in EXTRA_PARAMS] + [("softmax", "alibi"),
                                                                                    ("cog", "nape")])
def test_logits_agree_across_backends(variant, position):
    pytest.importorskip("triton", reason="triton is not installed")
    torch.manual_seed(1)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = Decoder(_config(variant, position)).eval().to(device)
    ids = torch.randint(0, 259, (1, 40), generator=torch.Generator().manual_seed(2)).to(device)
    logits = {}
    for backend in ("reference", "torch", "triton"):
        model.backend = backend
        cache = model.new_cache()
        with torch.no_grad():
            a, _ = model(ids[:, :37], cache)
            steps = [model(ids[:, t:t + 1], cache)[0] for t in range(37, 40)]
        logits[backend] = torch.cat([a, *steps], dim=1)
    scale = logits["reference"].abs().max()
    for backend in ("torch", "triton"):
        err = (logits[backend] - logits["reference"]).abs().max()
        assert err <= 1e-5 * scale, f"{backend}: {err}"
