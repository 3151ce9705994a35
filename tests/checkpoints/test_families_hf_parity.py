"""Tiny random Llama / Mistral / Qwen2 models saved by transformers, loaded by
lctx: same logits and same greedy tokens as transformers, for every RoPE scaling."""

from __future__ import annotations

import pytest
import torch

from checkpoints.generate import greedy_generate
from checkpoints.loading import load_model
from tests.checkpoints.hf_models import VOCAB, build_hf_model
from tests.helpers import HF_CASES, L0

pytestmark = pytest.mark.integration  # transformers runs the tiny models the logits are compared with

PROMPT_LEN = 3 * L0 // 2 + 5  # longer than the original context


def _prompt(seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, VOCAB, (1, PROMPT_LEN), generator=g)


def _max_pos(params: dict) -> int:
    return L0 if params["rope_type"] in ("default", "linear", "dynamic") else 4 * L0


@pytest.mark.parametrize("case", sorted(HF_CASES))
def test_llama_logits_and_greedy_tokens_match_transformers(tmp_path, case: str) -> None:
    params = HF_CASES[case]
    hf = build_hf_model(tmp_path, "llama", rope_parameters=params, max_position_embeddings=_max_pos(params),
                        head_dim=32, num_attention_heads=2, num_key_value_heads=1)
    # lctx keeps the dynamic-NTK base from the prompt for generated tokens; transformers
    # recomputes it every step. "step" mode reproduces transformers exactly.
    rope = {**params, "dynamic_update": "step"} if case == "dynamic" else None
    ours = load_model(tmp_path, rope=rope)
    ids = _prompt()
    with torch.no_grad():
        ref = hf(ids).logits
        got, _ = ours.model(ids)
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-4)

    hf_out = hf.generate(ids, max_new_tokens=20, do_sample=False, eos_token_id=None, pad_token_id=0,
                         min_new_tokens=20)[0, ids.shape[1]:].tolist()
    gen = greedy_generate(ours.model, ours.tokenizer, ids[0].tolist(), 20, stop_at_eos=False, chunk_size=32)
    assert gen.token_ids == hf_out


@pytest.mark.parametrize("family, extra", [
    ("mistral", {"sliding_window": 24}),
    ("qwen2", {"tie_word_embeddings": True}),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 24, "max_window_layers": 0}),
    ("llama", {"attention_bias": True}),
])
def test_other_families_match_transformers(tmp_path, family: str, extra: dict) -> None:
    hf = build_hf_model(tmp_path, family, max_position_embeddings=4 * L0, max_shard_size="40KB", **extra)
    assert (tmp_path / "model.safetensors.index.json").is_file(), "expected a sharded checkpoint"
    ours = load_model(tmp_path)
    ids = _prompt(2)
    with torch.no_grad():
        ref = hf(ids).logits
        got, _ = ours.model(ids)
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-4)
    hf_out = hf.generate(ids, max_new_tokens=20, do_sample=False, eos_token_id=None, pad_token_id=0,
                         min_new_tokens=20)[0, ids.shape[1]:].tolist()
    gen = greedy_generate(ours.model, ours.tokenizer, ids[0].tolist(), 20, stop_at_eos=False, chunk_size=17)
    assert gen.token_ids == hf_out


def test_chunked_prefill_and_reference_backend_agree(tmp_path) -> None:
    build_hf_model(tmp_path, "llama", rope_parameters=HF_CASES["yarn"], max_position_embeddings=4 * L0)
    ids = _prompt(3)[0].tolist()
    torch_backend = load_model(tmp_path, backend="torch")
    reference = load_model(tmp_path, backend="reference")
    a = greedy_generate(torch_backend.model, torch_backend.tokenizer, ids, 12, stop_at_eos=False, chunk_size=7)
    b = greedy_generate(reference.model, reference.tokenizer, ids, 12, stop_at_eos=False, chunk_size=1000)
    assert a.token_ids == b.token_ids


def test_rope_override_changes_logits_like_transformers(tmp_path) -> None:
    """A job's `yarn:4` override on a default-RoPE checkpoint equals a checkpoint saved with yarn."""
    build_hf_model(tmp_path / "plain", "llama", max_position_embeddings=L0, seed=5)
    hf_yarn = build_hf_model(tmp_path / "yarn", "llama", seed=5, max_position_embeddings=L0,
                             rope_parameters={"rope_type": "yarn", "factor": 4.0,
                                              "original_max_position_embeddings": L0})
    ours = load_model(tmp_path / "plain", rope="yarn:4")
    ids = _prompt(4)
    with torch.no_grad():
        torch.testing.assert_close(ours.model(ids)[0], hf_yarn(ids).logits, rtol=0, atol=1e-4)
