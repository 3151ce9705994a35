"""Tiny random Hugging Face models saved with `save_pretrained`: the oracle for
our loader, RoPE and decoder. Built offline; no hub access."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, models, pre_tokenizers

VOCAB = 96
REPO = "lctx-test/tiny-llama"  # a hub repository of the offline cache tests build
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def write_tokenizer(path: Path, vocab: int = VOCAB) -> None:
    """A whitespace word-level tokenizer.json over tokens t0..t{vocab-1} (t1 BOS, t2 EOS)."""
    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text('{"bos_token": "t1", "eos_token": "t2"}')


def build_hf_model(
    path: Path,
    family: str = "llama",
    rope_parameters: dict[str, Any] | None = None,
    max_shard_size: str | None = None,
    seed: int = 0,
    **overrides: Any,
):
    """Save a tiny random `<Family>ForCausalLM` under `path`; return the HF model.
    Families other than the first three also get random norm weights (theirs start at
    0 or 1, which would hide a norm read the wrong way)."""
    import transformers

    torch.manual_seed(seed)
    kwargs: dict[str, Any] = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        rope_parameters=(rope_parameters if rope_parameters and "full_attention" in rope_parameters  # Gemma 3
                         else {"rope_type": "default", "rope_theta": 10000.0, **(rope_parameters or {})}),
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    kwargs.update(overrides)
    config_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "gemma2": (transformers.Gemma2Config, transformers.Gemma2ForCausalLM),
        "gemma3_text": (transformers.Gemma3TextConfig, transformers.Gemma3ForCausalLM),
        "phi3": (transformers.Phi3Config, transformers.Phi3ForCausalLM),
        "olmo2": (transformers.Olmo2Config, transformers.Olmo2ForCausalLM),
        "smollm3": (transformers.SmolLM3Config, transformers.SmolLM3ForCausalLM),
    }[family]
    config = config_cls(**kwargs)
    config._attn_implementation = "eager"
    model = model_cls(config).eval()
    # Random init has tiny weights; widen them so logits are far from ties.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.2)
            elif family not in ("llama", "mistral", "qwen2"):
                p.add_(torch.randn_like(p) * 0.1)
    save_kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(path, **save_kwargs)
    write_tokenizer(path)
    return model


def hub_cache(root: Path, model_dir: Path, extra: dict[str, bytes] | None = None, skip: tuple[str, ...] = ()) -> Path:
    """huggingface_hub's cache layout: models--owner--name/{blobs,refs/main,snapshots/<commit>}
    with snapshot files linking to blobs named by content."""
    repo = root / ("models--" + REPO.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    files = {p.name: p.read_bytes() for p in model_dir.iterdir() if p.is_file() and p.name not in skip}
    for name, data in {**files, **(extra or {})}.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snapshot / name).symlink_to(Path("../../blobs") / blob.name)
    return root


def hub_offline(monkeypatch, cache: Path | None = None) -> None:
    """HF_HUB_OFFLINE for this test (huggingface_hub reads it at import, so the constant too),
    and `cache` as the default hub cache."""
    import huggingface_hub.constants as constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    if cache is not None:
        monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))


def tiny_gguf(path: Path, arch: str) -> Path:
    """A GGUF file of one tensor whose header names `arch` (for refusals: no model in it)."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
