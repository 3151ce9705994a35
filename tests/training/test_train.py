"""Training: a short run lowers the loss and writes a loadable checkpoint; the
synthetic rows follow the passkey protocol; the committed demo checkpoints
load and retrieve at their training length."""

from __future__ import annotations

import json

import pytest
import torch

from checkpoints.loading import load_model
from checkpoints.passkey_text import QUESTION, answer_text, passkey_prompt
from cli.main import main as cli_main
from training.synthetic import SyntheticText
from training.train import TrainConfig, demo_checkpoints, read_log, train, training_backend

TINY = dict(hidden_size=48, num_layers=2, num_heads=4, intermediate_size=96, batch_size=4)


def test_passkey_rows_follow_the_protocol() -> None:
    data = SyntheticText(seq_len=300, seed=3)
    tok = data.tokenizer
    for _ in range(20):
        row = data.passkey_row()
        ids, answer_at = row.ids, row.copies[0][0]
        prompt = tok.decode(ids[:answer_at])
        assert ids[0] == tok.bos_id and ids[-1] == tok.EOS
        assert answer_at <= 300  # the prompt never exceeds the training length
        assert prompt.startswith("There is an important info hidden") and prompt.endswith("\n" + QUESTION)
        key = int(prompt.split("The pass key is ")[1].split(".")[0])
        assert 1 <= key <= 50000
        assert tok.decode(ids[answer_at:]) == answer_text(key)
        blocks = prompt.split("\n")
        assert len(blocks) == 5 and blocks[2] == f"The pass key is {key}. Remember it. {key} is the pass key."
        assert prompt == passkey_prompt(key, len(blocks[1]) + len(blocks[3]), len(blocks[1]))
        repeat_at, key_len = row.copies[1]
        assert tok.decode(ids[repeat_at : repeat_at + key_len]) == str(key)
        assert tok.decode(ids[repeat_at - 13 : repeat_at]) == "Remember it. "


def test_training_and_evaluation_share_one_passkey_text() -> None:
    from evaluators.passkey import evaluator

    assert evaluator.passkey_prompt is passkey_prompt  # one text: the demo models learn what is evaluated


def test_dense_rows_mark_every_needle_repeat() -> None:
    data = SyntheticText(seq_len=256, seed=0, dense_fraction=1.0)
    row = data.dense_row()
    text = data.tokenizer.decode(row.ids)
    assert len(row.ids) <= 256 and len(row.copies) >= 2
    for start, length in row.copies:
        key = data.tokenizer.decode(row.ids[start : start + length])
        assert key.isdigit() and f"The pass key is {key}. Remember it. {key} is" in text


def test_batch_masks_padding_and_marks_the_answer() -> None:
    batch = SyntheticText(seq_len=280, seed=0).batch(6)
    assert batch.input_ids.shape == batch.targets.shape == batch.answer_mask.shape
    for row in range(6):
        answer_targets = batch.targets[row][batch.answer_mask[row]]
        text = bytes(int(t) for t in answer_targets if t < 256).decode()
        repeat, answer = text.split(" ")  # the key's repeat inside the needle, then the answer " key."
        assert answer == repeat + "." and repeat.isdigit()
        assert answer_targets[-1] == 257  # EOS ends the answer
        assert (batch.targets[row][batch.input_ids[row] == 258] == -100).all()  # no loss on padding


def test_too_short_sequence_is_refused_with_advice() -> None:
    with pytest.raises(ValueError, match="too short"):
        SyntheticText(seq_len=100, seed=0)


@pytest.mark.integration
def test_short_run_lowers_loss_and_saves_a_loadable_checkpoint(tmp_path) -> None:
    cfg = TrainConfig(steps=30, seq_len=260, lr=3e-3, warmup=5, seed=1, **TINY)
    result = train(cfg, tmp_path / "ckpt", progress=False)
    log = read_log(tmp_path / "ckpt")
    assert log[0]["step"] == 0 and log[-1]["step"] == 29
    assert log[-1]["loss"] < 0.6 * log[0]["loss"]
    info = json.loads((tmp_path / "ckpt" / "train_info.json").read_text())
    assert info["train_config"]["steps"] == 30 and info["seconds"] > 0
    loaded = load_model(tmp_path / "ckpt")
    assert loaded.config.attention.variant == "softmax" and loaded.config.max_position_embeddings == 260
    ids = loaded.tokenizer.encode(passkey_prompt(123, 10, 5))
    logits, _ = loaded.model(torch.tensor([ids]))
    assert torch.isfinite(logits).all()
    # the saved weights are the trained ones: same loss as at the end of training on a fresh batch shape
    assert result.final_loss == pytest.approx(log[-1]["loss"], abs=1e-4)


@pytest.mark.integration
def test_training_is_deterministic(tmp_path) -> None:
    cfg = TrainConfig(steps=3, seq_len=260, seed=7, **TINY)
    a = train(cfg, tmp_path / "a", progress=False)
    b = train(cfg, tmp_path / "b", progress=False)
    assert a.final_loss == b.final_loss
    wa, wb = load_model(tmp_path / "a").model.state_dict(), load_model(tmp_path / "b").model.state_dict()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.integration
@pytest.mark.parametrize("variant", ["softpick", "tda"])
def test_other_variants_train(tmp_path, variant) -> None:
    cfg = TrainConfig(variant=variant, steps=2, seq_len=260, **TINY)
    result = train(cfg, tmp_path / variant, progress=False)
    assert result.backend == training_backend(variant)
    assert load_model(tmp_path / variant).config.attention.variant == variant


@pytest.mark.integration
def test_cli_train(tmp_path, capsys) -> None:
    out = tmp_path / "cli"
    rc = cli_main(["train", "--variant", "softmax", "--out", str(out), "--steps", "2", "--seq-len", "260",
                   "--hidden-size", "32", "--layers", "1", "--heads", "2", "--intermediate-size", "64",
                   "--batch-size", "2", "--quiet"])
    assert rc == 0 and "saved" in capsys.readouterr().out
    assert load_model(out).config.hidden_size == 32


def test_cli_train_rejects_unknown_variant(tmp_path, capsys) -> None:
    rc = cli_main(["train", "--variant", "nope", "--out", str(tmp_path / "x"), "--steps", "1", "--quiet"])
    assert rc == 2 and "available" in capsys.readouterr().err


@pytest.mark.integration
def test_extra_text_is_mixed_in(tmp_path) -> None:
    text = tmp_path / "t.txt"
    text.write_text("lorem ipsum dolor sit amet " * 50)
    data = SyntheticText(seq_len=260, seed=0, texts=[text.read_text()], text_fraction=0.5)
    rows = [data.batch(1) for _ in range(20)]
    plain = [r for r in rows if not r.answer_mask.any()]
    assert plain and b"lorem" in bytes(int(t) for t in plain[0].input_ids[0] if t < 256)


def test_demo_checkpoints_are_listed_by_name() -> None:
    demos = demo_checkpoints()
    assert {"demo-softmax", "demo-softpick", "demo-tda"} <= set(demos)
    assert all((path / "train_info.json").is_file() and (path / "train_log.jsonl").is_file()
               for path in demos.values())


@pytest.mark.integration
@pytest.mark.parametrize("name", sorted(demo_checkpoints()))
def test_demo_checkpoint_retrieves_at_training_length(tmp_path, name) -> None:
    """The guide's claim (docs/guide/demo-checkpoints.md): every demo checkpoint reaches >= 90% passkey accuracy
    at its training length over 100 trials with the lctx evaluator."""
    from evaluators import run_task
    from tests.helpers import points

    path = demo_checkpoints()[name]
    info = json.loads((path / "train_info.json").read_text())
    length = info["train_config"]["seq_len"]
    loaded = load_model(path)
    assert loaded.config.attention.variant == info["train_config"]["variant"]
    result = run_task(loaded, {"name": "passkey", "lengths": [length], "trials": 100}, tmp_path)
    by_length = points(result, "accuracy", "length")
    assert by_length[length].n == 100 and by_length[length].value >= 0.9
