"""Passkey prompt exactly as the protocol writes it, lengths within the target,
the scoring rules, and the evaluator on a tiny model with resume."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoints.tokenizer import ByteTokenizer
from evaluators import EvaluationCancelled, EvaluatorError, run_task, validate_task
from evaluators.passkey.evaluator import (
    PasskeyEvaluator,
    first_integer_decided,
    fit_length,
    is_correct,
    passkey_prompt,
    sentence_boundaries,
)
from evaluators.registry import make_evaluator
from tests.helpers import points, tiny_model, typed

EXPECTED = (
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
    "I will quiz you about the important information there.\n"
    "The grass is green. The sky is blue. The sun\n"
    "The pass key is 4242. Remember it. 4242 is the pass key.\n"
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. The grass\n"
    "What is the pass key? The pass key is"
)


def test_prompt_is_the_five_blocks_of_the_protocol() -> None:
    prefix = "The grass is green. The sky is blue. The sun"
    suffix = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. The grass"
    assert passkey_prompt(4242, len(prefix) + len(suffix), len(prefix)) == EXPECTED


def test_seeded_prompt_is_pinned() -> None:
    """Seed 0, 400 byte tokens, trial 0: the whole prompt, string for string (a change in how
    keys and depths are drawn would silently change every published number)."""
    ev = PasskeyEvaluator(PasskeyEvaluator.validate({"lengths": [400], "seed": 0}))
    built = ev.trial_prompt(ByteTokenizer(), 400, 0)
    assert (built["key"], built["garbage_chars"], built["depth_chars"], len(built["ids"])) == (36111, 152, 74, 400)
    assert built["prompt"] == (
        "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
        "I will quiz you about the important information there.\n"
        "The grass is green. The sky is blue. The sun is yellow. Here we go. There \n"
        "The pass key is 36111. Remember it. 36111 is the pass key.\n"
        "The grass is green. The sky is blue. The sun is yellow. Here we go. There and \n"
        "What is the pass key? The pass key is"
    )


def test_trial_is_seeded_by_seed_length_and_trial() -> None:
    tok = ByteTokenizer()
    ev = PasskeyEvaluator(PasskeyEvaluator.validate({"lengths": [600], "seed": 3}))
    a = ev.trial_prompt(tok, 600, 7)
    b = PasskeyEvaluator(PasskeyEvaluator.validate({"lengths": [600, 900], "seed": 3})).trial_prompt(tok, 600, 7)
    assert a == b
    rng = random.Random("3/600/7")
    key = rng.randint(1, 50000)
    assert a["key"] == key and a["depth_chars"] == rng.randint(0, a["garbage_chars"])
    assert a["prompt"] == passkey_prompt(key, a["garbage_chars"], a["depth_chars"])
    assert ev.trial_prompt(tok, 600, 8)["key"] != key or ev.trial_prompt(tok, 600, 8)["depth_chars"] != a["depth_chars"]


@pytest.mark.parametrize("target", [300, 517, 1000, 2049])
def test_prompt_is_the_longest_that_fits(target: int) -> None:
    tok = ByteTokenizer()
    ev = PasskeyEvaluator(PasskeyEvaluator.validate({"lengths": [target]}))
    for trial in range(5):
        built = ev.trial_prompt(tok, target, trial)
        assert len(built["ids"]) <= target
        longer = passkey_prompt(built["key"], built["garbage_chars"] + 1, built["depth_chars"])
        # Byte tokens: one more garbage character would exceed the target (5-digit keys fit exactly).
        assert len(tok.encode(longer)) > target or len(str(built["key"])) < 5


def test_fit_length_is_maximal() -> None:
    tok = ByteTokenizer()
    g = fit_length(tok, 1000, lambda g: "x" * g)
    assert g == 999  # BOS + 999 bytes


@pytest.mark.parametrize(("output", "ok"), [
    ("12345", True), (" 12345.", True), ("  12345\n", True), ("12345 is the key", True),
    ("the key is 12345", True), ("123456", False), ("1234", False), ("no number", False),
    ("7 then 12345", False), ("", False),
])
def test_scoring_rules(output: str, ok: bool) -> None:
    assert is_correct(output, 12345) is ok


@settings(max_examples=300, deadline=None)
@given(key=st.integers(0, 99999), head=st.text("0123456789 .ab\n", max_size=12),
       tail=st.text("0123456789 .ab\n", max_size=12))
def test_a_decided_output_scores_the_same_whatever_follows(key, head, tail) -> None:
    """`stop_when_decided`: once the first integer is followed by another character, more
    text cannot change `is_correct`."""
    if first_integer_decided(head):
        assert is_correct(head + tail, key) == is_correct(head, key)


def test_decided_once_the_first_integer_ends() -> None:
    assert not first_integer_decided("The key is 123")  # the next token may add digits
    assert first_integer_decided("The key is 123.") and first_integer_decided("12345 is")
    assert not first_integer_decided("no digits yet ")
    assert not first_integer_decided("The key is 12\ufffd")  # a character still being completed


def test_stop_when_decided_gives_the_same_scores_and_shorter_predictions(tmp_path: Path) -> None:
    """The option through the engine on the softmax demo model, which answers its passkeys (" 9173."
    then EOS): the same scores as the whole budget, each prediction stopped at the character after
    the integer, marked in its record."""
    from checkpoints.loading import load_model

    loaded = load_model(Path(__file__).resolve().parents[3] / "demo" / "checkpoints" / "softmax")
    task = {"name": "passkey", "lengths": [200], "trials": 6, "seed": 3, "max_new_tokens": 12}
    full = run_task(loaded, task, tmp_path / "full")
    early = run_task(loaded, {**task, "stop_when_decided": True}, tmp_path / "early")
    rows = [[json.loads(x) for x in (tmp_path / d / "samples.jsonl").read_text().splitlines()]
            for d in ("full", "early")]
    assert [r["score"] for r in rows[0]] == [r["score"] for r in rows[1]] and sum(r["score"] for r in rows[0]) >= 3
    assert typed(full).metric("accuracy").value == typed(early).metric("accuracy").value
    assert not any(a.get("decided_early") for a in rows[0]) and all(b.get("decided_early") for b in rows[1])
    for a, b in zip(*rows, strict=True):
        assert first_integer_decided(b["prediction"]) and a["prediction"].startswith(b["prediction"])


def test_sentence_boundaries() -> None:
    assert sentence_boundaries("A b. C d.\nE") == [0, 5, 10, 11]


def test_options_are_validated() -> None:
    assert validate_task({"name": "passkey"})["trials"] == 100
    assert validate_task({"name": "passkey", "lengths": "100,200"})["lengths"] == [100, 200]
    with pytest.raises(EvaluatorError, match="unknown options"):
        validate_task({"name": "passkey", "lenghts": [5]})
    with pytest.raises(EvaluatorError, match="lengths.0: Input should be greater than 0"):
        validate_task({"name": "passkey", "lengths": [0]})
    with pytest.raises(EvaluatorError, match="lengths.0: Input should be a valid integer"):
        validate_task({"name": "passkey", "lengths": [True]})  # a boolean is not a length
    with pytest.raises(EvaluatorError, match="lengths.0: Input should be less than or equal to 10000000"):
        validate_task({"name": "passkey", "lengths": [10**8]})
    with pytest.raises(EvaluatorError, match="trials: Input should be a valid integer"):
        validate_task({"name": "passkey", "trials": 2.5})
    with pytest.raises(EvaluatorError, match="unknown task"):
        validate_task({"name": "passkee"})


def test_passkey_runs_aggregates_and_resumes(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    task = {"name": "passkey", "lengths": [260, 300], "trials": 3, "seed": 1}
    calls = []

    def stop_after_two() -> bool:
        return len(calls) >= 3  # initial report + two samples

    with pytest.raises(EvaluationCancelled):
        run_task(loaded, task, tmp_path / "out", progress=lambda *a: calls.append(a), should_stop=stop_after_two)
    lines = (tmp_path / "out" / "samples.jsonl").read_text().splitlines()
    assert len(lines) == 2
    seen = []
    result = run_task(loaded, task, tmp_path / "out", progress=lambda *a: seen.append(a))
    assert seen[0] == ("passkey", 2, 6) and seen[-1] == ("passkey", 6, 6)
    records = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)) == 6 and "passkey/len=300/trial=2" in ids
    assert all(r["prompt_tokens"] <= r["length"] for r in records)
    by_length = points(result, "accuracy", "length")
    assert set(by_length) == {260, 300} and by_length[300].n == 3
    assert by_length[300].value == sum(r["score"] for r in records if r["length"] == 300) / 3
    accuracy = typed(result).metric("accuracy")
    assert accuracy.value == sum(r["score"] for r in records) / 6 and accuracy.n == 6 and accuracy.higher_is_better
    assert typed(result).headline == "accuracy" and "passkey accuracy" in typed(result).summary
    assert result["model"]["backend"] and result["evaluator_version"] == "2" and result["seed"] == 1
    for n in (260, 300):  # the deciles within each length, never pooled over lengths
        deciles = points(result, "accuracy", "depth_decile", length=n)
        assert sum(p.n for p in deciles.values()) == 3
        for d, p in deciles.items():
            cell = [r["score"] for r in records if r["length"] == n and r["depth_decile"] == d]
            assert p.n == len(cell) and p.value == sum(cell) / len(cell)
    assert (tmp_path / "out" / "plots" / "passkey.png").is_file()
    # The four samples of the second run share the intro and the garbage up to their needles.
    reuse = result["prefix_cache"]
    assert reuse["enabled"] and reuse["prompt_tokens"] == sum(r["prompt_tokens"] for r in records[2:])
    assert 0.2 < reuse["reused_fraction"] < 1 and reuse["reused_tokens"] > 0


def test_target_below_the_fixed_blocks_is_flagged(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    result = run_task(loaded, {"name": "passkey", "lengths": [64], "trials": 1}, tmp_path / "out")
    assert typed(result).extra["over_target"] == {"64": 1}


def test_needle_grid_with_a_haystack_file(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    (tmp_path / "hay.txt").write_text("Alpha beta gamma. Delta epsilon! Zeta eta theta?\nIota kappa.")
    task = {"name": "needle", "lengths": [300, 400], "depths": [0, 50, 100], "haystack_file": "hay.txt"}
    result = run_task(loaded, task, tmp_path / "out", data_dir=tmp_path)
    for depth in (0, 50, 100):  # the grid: one series along length per depth
        assert set(points(result, "accuracy", "length", depth=depth)) == {300, 400}
    assert sum(p.n for p in points(result, "accuracy", "depth").values()) == 6
    assert (tmp_path / "out" / "plots" / "needle.png").is_file()
    recs = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert all(r["prompt_tokens"] <= r["length"] for r in recs)


def test_needle_sits_at_a_sentence_boundary() -> None:
    from evaluators.passkey.evaluator import NeedleEvaluator

    ev = NeedleEvaluator(NeedleEvaluator.validate({}))
    prompt = ev.prompt(777, 400, 50)
    before = prompt.split("\nThe pass key is 777.")[0]
    assert before.endswith((". ", "."))  # the haystack before the needle ends with a whole sentence
    with pytest.raises(EvaluatorError, match="percent"):
        validate_task({"name": "needle", "depths": [150]})


def test_lengths_are_in_the_models_own_tokens_with_a_bpe_tokenizer(tmp_path: Path) -> None:
    """With a multi-character tokenizer the fitted prompt is within the target and within
    a few tokens of it (one more garbage character never fits for the probe prompt)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from checkpoints.config import ModelConfig
    from checkpoints.tokenizer import JsonTokenizer
    from evaluators.passkey.evaluator import GARBAGE_SENTENCE, INTRO, KEY_RANGE, QUESTION

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["[UNK]", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    corpus = [INTRO, GARBAGE_SENTENCE * 3, QUESTION, "The pass key is 12345. Remember it. 12345 is the pass key."]
    tok.train_from_iterator(corpus * 20, trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text('{"bos_token": "<s>", "eos_token": "</s>"}')
    bpe = JsonTokenizer(tmp_path, ModelConfig(hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=2,
                                              intermediate_size=128, vocab_size=400))
    assert len(bpe.encode(GARBAGE_SENTENCE)) < len(GARBAGE_SENTENCE) / 2  # really multi-character tokens
    ev = PasskeyEvaluator(PasskeyEvaluator.validate({"lengths": [200, 500]}))
    for target in (200, 500):
        g = ev.garbage_for(bpe, target)
        probe = lambda n: len(bpe.encode(passkey_prompt(KEY_RANGE[1], n, n // 2)))  # noqa: E731
        assert probe(g) <= target < probe(g + 1)
        for trial in range(10):
            built = ev.trial_prompt(bpe, target, trial)
            assert target - 4 <= len(built["ids"]) <= target
            assert built["ids"] == bpe.encode(built["prompt"])


def test_training_text_uses_the_same_prompt() -> None:
    """The demo models are trained on training.synthetic's copy of the protocol."""
    synthetic = pytest.importorskip("training.synthetic")
    for key, g, p in ((1, 0, 0), (4242, 300, 17), (50000, 1000, 1000)):
        assert synthetic.passkey_prompt(key, g, p) == passkey_prompt(key, g, p)


@pytest.mark.parametrize("task", ["passkey", "needle"])
def test_chat_template_wraps_the_fitted_prompt_and_the_result_says_so(tmp_path: Path, task: str) -> None:
    loaded = tiny_model(tmp_path / "m")
    loaded.tokenizer.chat_template = ("{% for m in messages %}<user>{{ m['content'] }}</user>{% endfor %}"
                                      "{% if add_generation_prompt %}<bot>{% endif %}")
    loaded.tokenizer.chat_template_source = "chat_template.jinja"
    spec = {"name": task, "lengths": [300], "seed": 0, "chat_template": True,
            **({"trials": 2} if task == "passkey" else {"depths": [50]})}
    entry = run_task(loaded, spec, tmp_path / "out")
    assert entry["chat_template"] == {"applied": True, "file": "chat_template.jinja"}
    records = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert all(290 <= r["prompt_tokens"] <= 300 for r in records)  # fitted with the template's tokens counted
    ev = make_evaluator(spec)
    built = ev.build(loaded, ev.plan(loaded)[0])
    text = loaded.tokenizer.decode(list(built.request.prompt_ids))
    assert text.startswith("<user>There is an important info") and text.endswith("The pass key is</user><bot>")
    plain = run_task(loaded, {**spec, "chat_template": False}, tmp_path / "plain")
    assert plain["chat_template"]["applied"] is False
    del loaded.tokenizer.chat_template  # the byte tokenizer's own: none
    with pytest.raises(EvaluatorError, match=f"{task}: chat_template=true but the checkpoint has no chat template"):
        run_task(loaded, spec, tmp_path / "none")
