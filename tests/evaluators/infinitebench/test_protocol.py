"""InfiniteBench's scorers against an independent reading of compute_scores.py (commit
88b3daa) on crafted outputs, one case per branch of each scorer, the known bugs named;
and its prompts and truncation against eval_utils.py / prompt.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cli.main import main
from evaluators.infinitebench import protocol
from evaluators.infinitebench.protocol import score_one

# --- the reading: compute_scores.py's functions, restated step by step ------------------


def read_first_int(pred: str) -> str:
    for item in re.split("[^0-9]", pred):
        if item != "":
            return item
    return ""


def read_spaced(pred: str, chars: list[str]) -> list[str]:
    for c in chars:
        pred = pred.replace(c, " ")
    return pred.split()


PUNCT = ["\n", ":", '"', "'", ".", ",", "?", "!", "{", "}"]

# (task, prediction, label, expected literal score, why) — expected values worked out by hand from the code
CASES = [
    ("passkey", " 71432. Remember it. 71432", ["71432"], 1.0, "first digit run"),
    ("passkey", "The key is 7143 or 71432", ["71432"], 0.0, "first digit run only"),
    ("passkey", "none", ["71432"], 0.0, "no digits: ''"),
    ("number_string", "3000077442.\n\nIf you", ["3000077442"], 1.0, "label list"),
    ("number_string", "３000077442", "3000077442", 0.0, "full-width digit splits the run"),
    ("kv_retrieval", 'The value is "5e6b-71".', "5e6b-71", 1.0, "a word after punctuation is spaced"),
    ("kv_retrieval", "5e6b-712", "5e6b-71", 0.0, "whole words only"),
    ("kv_retrieval", "a 5e6b-71 b", ["5e6b-71"], 0.0, "a label given as a list never matches"),
    ("code_run", " 24.\n\nThe value of x is 4", [4], 1.0, "last word"),
    ("code_run", "The value is -5", [-5], 1.0, "the minus sign stays"),
    ("code_run", "It returns 4 maybe", [4], 0.0, "last word not an integer"),
    ("code_run", "   ", [4], 0.0, "no words"),
    ("code_debug", "B. Configer._set_option", ["Configer._set_option", "B"], 1.0, "'X.' at the start"),
    ("code_debug", "C: yes", ["f", "C"], 1.0, "'X:' at the start"),
    ("code_debug", "The answer is: Option B", ["f", "B"], 1.0, "'answer is:' then 'Option' removed"),
    ("code_debug", "I think the function is: repack_carchive", ["repack_carchive", "A"], 1.0, "name after 'is:'"),
    ("code_debug", "The correct option is: D", ["f", "D"], 1.0, "'is:' found first, inside 'correct option is:'"),
    ("code_debug", "my answer is:", ["f", "A"], 0.0, "the prefix ends the prediction"),
    ("code_debug", "answer is:B", ["f", "B"], 0.0, "the character after the prefix is skipped"),
    ("code_debug", "answer: A", ["f", "B"], 0.0, "the first prefix found decides"),
    ("code_debug", "B", ["f", "B"], 0.0, "a bare letter has no '.' or ':' and no prefix"),
    ("longdialogue_qa_eng", "referring to Ace Rothstein.", ["ACE", "ACE ROTHSTEIN"], 1.0, "upper-cased word"),
    ("longdialogue_qa_eng", "Remo", ["GAGGI", "Remo"], 0.0, "only the first reference"),
    ("longdialogue_qa_eng", "Stamp Paid", ["STAMP PAID"], 0.0, "a two-word name never matches (issue #18)"),
    ("longbook_choice_eng", "A", ["Walking Georgie", "A"], 1.0, "first character a letter"),
    ("longbook_choice_eng", "Answer: B", ["Walking Georgie", "A"], 1.0, "BUG: 'Answer' starts with A"),
    ("longbook_choice_eng", "Walking Georgie", ["Walking Georgie", "C"], 1.0, "the option's text"),
    ("longbook_choice_eng", "The answer is C.", ["Snowfield", "C"], 1.0, "'answer is' prefix"),
    ("longbook_choice_eng", "My answer is: Snowfield", ["Snowfield", "C"], 1.0, "'answer is:' then the text"),
    ("longbook_choice_eng", "The answer is", ["Snowfield", "C"], 0.0, "the prefix ends the prediction"),
    ("longbook_choice_eng", "I pick the option is D", ["x", "C"], 0.0, "'option is' prefix, wrong letter"),
    ("longbook_choice_eng", "It must be D, surely", ["x", "D"], 1.0, "first word that is a letter"),
    ("longbook_choice_eng", "It must be AB", ["AB", "C"], 1.0, "'AB' is a substring of 'ABCD'"),
    ("longbook_choice_eng", "no idea", ["x", "C"], 0.0, "nothing found"),
    ("longbook_choice_eng", "  ", ["x", "C"], 0.0, "empty"),
    ("math_find", "85\n\nAs an AI", [85], 1.0, "first integer"),
    ("math_find", "It is 3.5", [3.5], 1.0, "float label"),
    ("math_find", "It is -7", [-7], 0.0, "the minus sign is not read"),
    ("math_find", "It is 3.5", [3], 0.0, "BUG: compute_scores raises on int('3.5'); lctx scores 0"),
    ("math_find", "none", [3], 0.0, "no number"),
    ("math_calc", " [79, 59, 73, 1]", [[79, 59, 73, 78]], 0.75, "prefix of a list in a list"),
    ("math_calc", "[79, 59]", [79, 59, 73, 78], 0.5, "the prediction runs out"),
    ("math_calc", "[1, -3]", [1, -3], 0.5, "minus signs are not read"),
    ("math_calc", "[5]", [4, 5], 0.0, "a wrong first value"),
]


@pytest.mark.parametrize(("task", "pred", "label", "want", "why"), CASES, ids=[f"{c[0]}-{c[4]}" for c in CASES])
def test_each_branch_of_compute_scores(task, pred, label, want, why) -> None:
    assert score_one(task, pred, label).literal == want, why


def test_the_reading_agrees_on_the_retrieval_cases() -> None:
    """The restated helpers give the same verdicts as protocol on the retrieval and dialogue cases."""
    for task, pred, label, want, _ in CASES:
        if task in ("passkey", "number_string"):
            assert float((label[0] if isinstance(label, list) else label) == read_first_int(pred)) == want
        if task == "kv_retrieval":
            assert float(label in read_spaced(pred, PUNCT)) == want
        if task == "longdialogue_qa_eng":
            assert float(label[0] in [w.upper() for w in read_spaced(pred.strip(), PUNCT)]) == want


def test_corrected_values_where_the_letter_rewards_a_wrong_answer() -> None:
    s = score_one("longbook_choice_eng", "Answer: B", ["Walking Georgie", "A"])
    assert (s.literal, s.corrected) == (1.0, 0.0) and s.note
    s = score_one("longbook_choice_eng", "A. Walking Georgie", ["Walking Georgie", "A"])
    assert (s.literal, s.corrected, s.note) == (1.0, 1.0, None)
    s = score_one("math_find", "3.5", [3])
    assert s.note and "ValueError" in s.note
    with pytest.raises(ValueError, match="neither int nor float"):
        score_one("math_find", "3", ["3"])


def test_math_calc_gpt4_drops_the_first_number() -> None:
    assert score_one("math_calc", "Values: 3 [1, 4, 8]", [1, 4, 8], "gpt4").literal == 1.0
    assert score_one("math_calc", "Values: 3 [1, 4, 8]", [1, 4, 8], "yarn-mistral").literal == 0.0


def test_token_f1_where_the_readme_says_rouge() -> None:
    assert score_one("longbook_qa_eng", "The Peyton.", ['"Peyton"']).literal == 1.0
    # "mrs deandra is last" vs "mrs deandra": 2 common, P 2/4, R 2/2 -> F1 2/3
    assert score_one("longbook_qa_eng", "Mrs. Deandra is last", ['"Mrs. Deandra"']).literal == pytest.approx(2 / 3)
    assert score_one("longbook_qa_eng", "x", ["y", "x z"]).literal == pytest.approx(2 / 3)  # best reference
    # one token per character, Chinese punctuation and spaces dropped: 胡一刀 vs 胡一刀，马行空 -> P 1, R 3/6
    assert score_one("longbook_qa_chn", "胡 一刀。", ["胡一刀，马行空"]).literal == pytest.approx(2 * 0.5 / 1.5)


def test_rouge_lsum_of_the_summary() -> None:
    # LCS of "the cat sat" in "the cat sat on the mat": 3 -> P 1, R 1/2, F 2/3; the best of two references
    assert score_one("longbook_sum_eng", "The cat sat", ["The cat sat on the mat"]).literal == pytest.approx(2 / 3)
    assert score_one("longbook_sum_eng", "The cat sat", ["dogs", "the cat sat"]).literal == pytest.approx(1.0)


def test_prompts_as_create_prompt_fills_them() -> None:
    eg = {"context": "CTX", "input": "What is the pass key?", "answer": ["1"], "options": []}
    assert protocol.create_prompt(eg, "passkey", "open") == (
        "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you "
        "about the important information.\n\nCTX\n\nWhat is the pass key?\n\nThe pass key is")
    run = {"context": "def func_1(x): ...", "input": "What is func_12(-3) and func_4(1)?", "answer": [1]}
    assert protocol.create_prompt(run, "code_run", "open").endswith(
        "compute the exact value of func_12(-3). The value of func_12(-3) is")
    find = {"context": "[1, 2]", "input": "What is The largest number of the list?", "answer": [2]}
    assert protocol.create_prompt(find, "math_find", "gpt4").startswith(
        "What is the largest number in the following list?\n\n[1, 2]\n\n")
    choice = {"context": "B", "input": "Q?", "options": ["w", "x", "y", "z"], "answer": "y"}
    assert protocol.get_answer(choice, "longbook_choice_eng") == ["y", "C"]
    assert protocol.get_answer({**choice, "answer": ["x"]}, "code_debug") == ["x", "B"]
    assert "\nC. y\nD. z\n\nThe letter of the correct answer is" in protocol.create_prompt(
        choice, "longbook_choice_eng", "open")
    msgs = protocol.gpt4_messages("1 + 2", "math_calc")
    assert [m["role"] for m in msgs] == ["system", "user", "system", "user"] and msgs[-1]["content"] == "1 + 2"


def test_truncate_middle_keeps_both_halves() -> None:
    assert protocol.truncate_middle(list(range(10)), 10) == (list(range(10)), False)
    assert protocol.truncate_middle(list(range(10)), 4) == ([0, 1, 8, 9], True)
    assert protocol.truncate_middle(list(range(10)), 5) == ([0, 1, 8, 9], True)  # an odd budget keeps one fewer


def test_lctx_score_reads_the_scripts_files(tmp_path: Path, capsys) -> None:
    pred = tmp_path / "gpt4"
    pred.mkdir()
    lines = {"passkey": [{"id": 0, "prediction": " 71432.", "ground_truth": ["71432"]},
                         {"id": 1, "prediction": "no", "ground_truth": ["69079"]}],
             "longbook_choice_eng": [{"id": 0, "pred": "Answer: B", "label": ["W", "A"]}],
             "math_calc": [{"id": 0, "prediction": "3 [1, 4]", "ground_truth": [[1, 4]]}]}
    for task, rows in lines.items():
        (pred / f"preds_{task}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    assert main(["score", "infinitebench", "--pred-dir", str(pred)]) == 0
    table = json.loads((pred / "result.json").read_text())
    assert table["passkey"] == {"score": 0.5, "percent": 50.0, "n": 2}
    assert table["longbook_choice_eng"]["score"] == 1.0 and table["longbook_choice_eng"]["score_corrected"] == 0.0
    assert table["math_calc"]["score"] == 1.0  # the folder is named gpt4: the first number dropped
    assert table["average"] == round((50 + 100 + 100) / 3, 2) and table["model_name"] == "gpt4"
    assert main(["score", "infinitebench", "--pred-dir", str(pred), "--model-name", "yi-6b-200k"]) == 0
    assert json.loads((pred / "result.json").read_text())["math_calc"]["score"] == 0.0
    (pred / "preds_passkey.jsonl").write_text('{"id": 0, "prediction": "1"}\n')
    assert main(["score", "infinitebench", "--pred-dir", str(pred)]) != 0
    assert "Cannot find label" in capsys.readouterr().err
