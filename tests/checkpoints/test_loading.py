"""Loading refuses bad checkpoints with errors a person can act on, and our own
format round-trips."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from checkpoints.config import ModelConfig
from checkpoints.config_reader import read_config
from checkpoints.errors import ConfigError, LoadError
from checkpoints.generate import greedy_generate, loglikelihood, token_logprobs
from checkpoints.loading import load_model
from checkpoints.tokenizer import BYTE_TOKENIZER_FILE
from tests.checkpoints.hf_models import build_hf_model
from tests.helpers import tiny_own


def test_own_format_round_trip(tmp_path) -> None:
    model = tiny_own(tmp_path, tie_word_embeddings=True, rotary_layout="interleaved")
    loaded = load_model(tmp_path)
    assert loaded.config.rotary_layout == "interleaved" and loaded.config.tie_word_embeddings
    ids = torch.tensor([loaded.tokenizer.encode("round trip")])
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(ids)[0], model(ids)[0])
    assert loaded.model.lm_head.weight.data_ptr() == loaded.model.embed.weight.data_ptr()


def test_another_rope_setting_takes_the_held_weights_and_equals_a_fresh_load(tmp_path, monkeypatch) -> None:
    """A worker switching RoPE settings keeps its tensors (nothing read from disk, the same
    storage, ties kept) and the model equals a fresh load under the new setting; a held model
    of another dtype is not taken."""
    import checkpoints.loading as loading

    tiny_own(tmp_path, tie_word_embeddings=True)
    plain = load_model(tmp_path)
    fresh = load_model(tmp_path, rope="yarn:4")
    monkeypatch.setattr(loading, "read_state_dict", lambda *a: pytest.fail("read from disk"))
    kept = load_model(tmp_path, rope="yarn:4", weights=plain.model)
    assert kept.config == fresh.config and kept.config.rope_scaling.type == "yarn"
    assert kept.model.embed.weight.data_ptr() == plain.model.embed.weight.data_ptr()
    assert kept.model.lm_head.weight.data_ptr() == kept.model.embed.weight.data_ptr()
    ids = torch.tensor([list(range(3, 200))])
    with torch.no_grad():
        torch.testing.assert_close(kept.model(ids)[0], fresh.model(ids)[0], rtol=0, atol=0)
        assert not torch.equal(kept.model(ids)[0], plain.model(ids)[0])  # the setting took effect
    with pytest.raises(pytest.fail.Exception, match="read from disk"):
        load_model(tmp_path, rope="yarn:4", dtype="bfloat16", weights=plain.model)


def test_a_tokenizer_larger_than_the_embedding_is_refused_at_load(tmp_path) -> None:
    """Ids past the embedding would fail (an IndexError) inside the first forward, minutes later."""
    from tests.checkpoints.hf_models import write_tokenizer

    tiny_own(tmp_path)  # 259 embedding rows
    (tmp_path / BYTE_TOKENIZER_FILE).unlink()
    write_tokenizer(tmp_path, vocab=300)
    with pytest.raises(LoadError, match="the tokenizer has 300 tokens but the model's embedding has 259 rows"):
        load_model(tmp_path)


def test_config_writes_v5_rope_parameters_and_reads_back(tmp_path) -> None:
    tiny_own(tmp_path, rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128})
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["rope_parameters"]["rope_type"] == "yarn" and "rope_scaling" not in raw
    assert load_model(tmp_path).config.rope_scaling.factor == 4.0


def test_v4_rope_scaling_spellings_are_read(tmp_path) -> None:
    build_hf_model(tmp_path, "llama")
    raw = json.loads((tmp_path / "config.json").read_text())
    del raw["rope_parameters"]
    for key in ("type", "rope_type"):
        raw.update(rope_theta=500000.0, rope_scaling={key: "linear", "factor": 2.0})
        cfg = read_config(raw)
        assert (cfg.rope_theta, cfg.rope_scaling.type, cfg.rope_scaling.factor) == (500000.0, "linear", 2.0)


def test_missing_weights_file(tmp_path) -> None:
    tiny_own(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(LoadError, match="no weights in .*expected model.safetensors"):
        load_model(tmp_path)


def test_missing_shard_named_by_index(tmp_path) -> None:
    build_hf_model(tmp_path, "llama", max_shard_size="40KB")
    shard = sorted(tmp_path.glob("model-*.safetensors"))[0]
    shard.unlink()
    with pytest.raises(LoadError, match=f"shard files that do not exist: .*{shard.name}"):
        load_model(tmp_path)


def test_misshaped_missing_and_unexpected_tensors_are_all_listed(tmp_path) -> None:
    tiny_own(tmp_path)
    state = load_file(str(tmp_path / "model.safetensors"))
    state["layers.0.attn.q_proj.weight"] = torch.zeros(8, 32)
    del state["layers.1.mlp.up_proj.weight"]
    state["layers.9.extra.weight"] = torch.zeros(2)
    save_file(state, str(tmp_path / "model.safetensors"))
    with pytest.raises(LoadError) as err:
        load_model(tmp_path)
    msg = str(err.value)
    assert "missing (1): layers.1.mlp.up_proj.weight" in msg
    assert "unexpected (1): layers.9.extra.weight" in msg
    assert "layers.0.attn.q_proj.weight: checkpoint (8, 32), config expects (32, 32)" in msg


@pytest.mark.parametrize("suffix", [".bin", ".pt", ".pth", ".pkl"])
def test_pickle_files_are_refused(tmp_path, suffix: str) -> None:
    tiny_own(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / f"pytorch_model{suffix}").write_bytes(b"\x80\x04not really a pickle")
    with pytest.raises(LoadError, match="refuses to load pickle files .* Convert them"):
        load_model(tmp_path)


def test_unknown_rope_type_in_config(tmp_path) -> None:
    build_hf_model(tmp_path, "llama")
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["rope_parameters"] = {"rope_type": "wobble", "rope_theta": 1e4}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="unknown rope type 'wobble'; supported rope types: default, linear"):
        load_model(tmp_path)


def test_factor_below_one(tmp_path) -> None:
    build_hf_model(tmp_path, "llama")
    with pytest.raises(ConfigError, match="factor must be >= 1 for 'linear', got 0.5"):
        load_model(tmp_path, rope={"rope_type": "linear", "factor": 0.5})


def test_config_without_required_keys(tmp_path) -> None:
    build_hf_model(tmp_path, "llama")
    raw = json.loads((tmp_path / "config.json").read_text())
    del raw["num_hidden_layers"], raw["vocab_size"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="missing required keys: num_hidden_layers, vocab_size"):
        load_model(tmp_path)


def test_unknown_model_type_lists_supported(tmp_path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ConfigError, match="unsupported model_type 'gpt2'; supported: lctx, llama, mistral, qwen2"):
        load_model(tmp_path)


def test_unknown_backend_and_dtype(tmp_path) -> None:
    tiny_own(tmp_path)
    with pytest.raises(ConfigError, match="unknown attention backend 'cuda'; choose one of auto, reference"):
        load_model(tmp_path, backend="cuda")
    with pytest.raises(LoadError, match="unsupported dtype 'int8'"):
        load_model(tmp_path, dtype="int8")


def test_bfloat16_load(tmp_path) -> None:
    tiny_own(tmp_path)
    loaded = load_model(tmp_path, dtype="bfloat16")
    assert loaded.model.dtype == torch.bfloat16
    out = greedy_generate(loaded.model, loaded.tokenizer, loaded.tokenizer.encode("abc"), 3)
    assert len(out.token_ids) <= 3


def test_stop_strings_eos_and_length(tmp_path) -> None:
    tiny_own(tmp_path)
    loaded = load_model(tmp_path)
    tok, model = loaded.tokenizer, loaded.model
    ids = tok.encode("The pass key is")
    free = greedy_generate(model, tok, ids, 12, stop_at_eos=False)
    assert free.stop_reason == "length" and len(free.token_ids) == 12
    # Stop at a string that the free run produced: the text is cut just before it.
    target = free.text[3:5]
    stopped = greedy_generate(model, tok, ids, 12, stop=[target], stop_at_eos=False)
    assert stopped.stop_reason == "stop_string"
    assert stopped.text == free.text[: free.text.find(target)]
    # Make the first greedy token the EOS id: generation stops with nothing.
    first = free.token_ids[0]
    tok.eos_ids = [first]
    assert greedy_generate(model, tok, ids, 12).stop_reason == "eos"
    # min_new_tokens blocks EOS and the suppressed ids at first: the runner-up token comes out
    forced = greedy_generate(model, tok, ids, 3, min_new_tokens=1, suppress_ids=[first])
    assert forced.token_ids and forced.token_ids[0] != first and forced.stop_reason in ("eos", "length")


def test_loglikelihood_matches_token_logprobs(tmp_path) -> None:
    tiny_own(tmp_path)
    loaded = load_model(tmp_path)
    ids = loaded.tokenizer.encode("a context, then a continuation")
    ll, _ = loglikelihood(loaded.model, ids[:10], ids[10:])
    per_token = token_logprobs(loaded.model, ids, chunk_size=4)
    assert ll == pytest.approx(float(per_token[9:].sum()), rel=1e-5)
    # greedy flag: the model's own greedy continuation is greedy
    gen = greedy_generate(loaded.model, loaded.tokenizer, ids, 5, stop_at_eos=False)
    assert loglikelihood(loaded.model, ids, gen.token_ids)[1] is True


def test_v5_partial_rotary_factor_inside_rope_parameters() -> None:
    from transformers import LlamaConfig

    raw = LlamaConfig(hidden_size=64, num_attention_heads=2, head_dim=32, partial_rotary_factor=0.5,
                      rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}).to_dict()
    assert "partial_rotary_factor" in raw["rope_parameters"]
    cfg = read_config(raw)
    assert (cfg.partial_rotary_factor, cfg.rotary_dim, cfg.rope_scaling.type) == (0.5, 16, "yarn")


@pytest.mark.parametrize("kind", ["linear", "dynamic", "yarn", "llama3"])
def test_scaled_rope_without_factor_is_an_error(tmp_path, kind: str) -> None:
    build_hf_model(tmp_path, "llama")
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["rope_parameters"] = {"rope_type": kind, "rope_theta": 1e4}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match=f"rope type '{kind}' needs a 'factor'"):
        load_model(tmp_path)


def test_dynamic_rope_records_which_base_generation_used() -> None:
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=8, vocab_size=8,
                      rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    assert cfg.rope_scaling.to_dict()["dynamic_update"] == "prefill"
    assert cfg.to_dict()["rope_parameters"]["dynamic_update"] == "prefill"


def test_special_tokens_from_tokenizer_generation_and_model_configs(tmp_path) -> None:
    from checkpoints.tokenizer import load_tokenizer
    from tests.checkpoints.hf_models import write_tokenizer

    write_tokenizer(tmp_path)  # tokenizer_config.json: bos t1, eos t2
    (tmp_path / "generation_config.json").write_text('{"eos_token_id": [5, 2]}')
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=8, vocab_size=96,
                      bos_token_id=9, eos_token_id=[7])
    tok = load_tokenizer(tmp_path, cfg)
    assert tok.bos_id == 1
    assert tok.eos_ids == [5, 2, 7]  # generation_config, then tokenizer_config, then config.json
    # Without tokenizer_config.json the model config's ids are used.
    (tmp_path / "tokenizer_config.json").unlink()
    (tmp_path / "generation_config.json").unlink()
    tok = load_tokenizer(tmp_path, cfg)
    assert (tok.bos_id, tok.eos_ids) == (9, [7])
    assert tok.encode("t3 t4") == [3, 4] and tok.decode([3, 4]) == "t3 t4"


def test_chat_template_from_tokenizer_config_or_chat_template_jinja(tmp_path) -> None:
    from checkpoints.tokenizer import load_tokenizer
    from tests.checkpoints.hf_models import write_tokenizer

    write_tokenizer(tmp_path)
    cfg = ModelConfig(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=8, vocab_size=96)
    assert load_tokenizer(tmp_path, cfg).chat_template is None
    (tmp_path / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")  # transformers >= 4.43's file
    assert load_tokenizer(tmp_path, cfg).chat_template == "{{ messages[0]['content'] }}"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "from config"}))
    # transformers reads chat_template.jinja first: the file beside the config wins over its field
    assert load_tokenizer(tmp_path, cfg).chat_template == "{{ messages[0]['content'] }}"
    (tmp_path / "chat_template.jinja").unlink()
    assert load_tokenizer(tmp_path, cfg).chat_template == "from config"
