"""LongBench v2's protocol against pred.py and result.py (THUDM/LongBench, top level):
answer extraction, template filling, middle truncation, result.py's numbers on crafted
predictions and `lctx score longbench-v2`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluators.errors import EvaluatorError
from evaluators.longbench_v2 import protocol
from evaluators.longbench_v2.scoring import score_prediction_dir


@pytest.mark.parametrize(("response", "letter"), [
    ("The correct answer is (B)", "B"),
    ("The correct answer is B.", "B"),
    ("**The correct answer is (C)**", "C"),  # asterisks removed first
    ("The correct answer is **(D)**", "D"),
    ("I think... The correct answer is (A). Or maybe The correct answer is (B)", "A"),  # the first
    ("The correct answer is (AB)", None),  # "(A" then "B": neither pattern (the bare one wants a letter after "is ")
    ("The correct answer is AC", "A"),  # several letters: the first
    ("The correct answer is B and The correct answer is (C)", "C"),  # the parenthesised pattern wins
    ("the correct answer is (b)", None),  # lower case: no match
    ("The correct answer is (b)", None),
    ("The correct answer is (E)", None),
    ("The answer is (B)", None),
    ("", None),
    ("B", None),
    ("The correct answer is  (B)", None),  # two spaces: neither pattern
])
def test_extraction_as_pred_py(response: str, letter: str | None) -> None:
    assert protocol.extract_answer(response) == letter


ITEM = {"_id": "x", "domain": "d", "sub_domain": "s", "difficulty": "easy", "length": "short",
        "question": "  Who? ", "choice_A": " a1", "choice_B": "b1 ", "choice_C": "c1", "choice_D": "d1",
        "answer": "C", "context": "\n Doc says $Q$ here. \n"}


def test_zero_shot_prompt_is_the_template_filled_in_pred_py_order() -> None:
    prompt = protocol.first_prompt(ITEM, cot=False, no_context=False, rag=0)
    # $DOC$ goes in first, so the document's "$Q$" is replaced by the question too (pred.py's chain)
    assert prompt == ("Please read the following text and answer the question below.\n\n<text>\nDoc says Who? here."
                      "\n</text>\n\nWhat is the correct answer to this question: Who?\nChoices:\n(A) a1\n(B) b1\n"
                      "(C) c1\n(D) d1\n\nFormat your response as follows: \"The correct answer is (insert answer "
                      "here)\".")


def test_cot_prompts_two_steps() -> None:
    first = protocol.first_prompt(ITEM, cot=True, no_context=False, rag=0)
    assert first.startswith("Please read the following text and answer the questions below.")
    assert first.endswith("(D) d1\n\nLet\u2019s think step by step:")
    second = protocol.answer_prompt(ITEM, "reasoning with $Q$")
    assert "The text is too long and omitted here." in second and "Doc says" not in second
    # $COT$ goes in last: the reasoning's "$Q$" stays as written
    assert "Let\u2019s think step by step: reasoning with $Q$\n\nBased on the above, what is the single, most " \
           "likely answer choice?" in second


def test_no_context_and_rag_prompts() -> None:
    assert protocol.first_prompt(ITEM, cot=False, no_context=True, rag=0).startswith(
        "What is the correct answer to this question: Who?\nChoices:")
    item = {**ITEM, "retrieved_context": [{"c_idx": 5, "content": "five"}, {"c_idx": 2, "content": "two"},
                                          {"c_idx": 1, "content": "one"}]}
    prompt = protocol.first_prompt(item, cot=False, no_context=False, rag=2)
    # the top two, put back in document order, numbered after sorting
    assert "<text>\nRetrieved chunk 1: two\n\nRetrieved chunk 2: five\n</text>" in prompt
    assert prompt.startswith("Please read the following retrieved text chunks")


@pytest.mark.parametrize("max_len", [6, 7])
def test_truncation_keeps_max_len_tokens_tail_rounded_up(max_len: int) -> None:
    ids = list(range(20))
    kept, truncated = protocol.keep_middle_out(ids, max_len)
    head, tail = max_len // 2, max_len - max_len // 2  # Python: ids[-7//2:] is the last 4
    assert truncated and kept == ids[:head] + ids[-tail:] and len(kept) == max_len
    assert protocol.keep_middle_out(ids, 20) == (ids, False)


def test_default_budget_scales_128k_to_120000() -> None:
    assert protocol.default_budget(131072, 1024) == 120000
    assert protocol.default_budget(8192, 128) == 7500
    assert protocol.default_budget(1024, 1024) == 0  # the evaluator refuses it


def _item(i: int, difficulty: str, length: str, pred: str | None, answer: str = "A") -> dict:
    return {"_id": str(i), "difficulty": difficulty, "length": length, "pred": pred, "answer": answer,
            "judge": pred == answer}


# 7 questions worked out by hand as result.py counts them:
# easy: 0 (short, right), 1 (medium, wrong), 2 (long, right)      -> 2/3 = 66.7
# hard: 3 (short, wrong), 4 (medium, right), 5 (long, no answer), 6 (long, right) -> 2/4 = 50.0
# overall 4/7 = 57.1; short 1/2 = 50.0, medium 1/2 = 50.0, long 2/3 = 66.7
CRAFTED = [_item(0, "easy", "short", "A"), _item(1, "easy", "medium", "B"), _item(2, "easy", "long", "A"),
           _item(3, "hard", "short", "C"), _item(4, "hard", "medium", "A"), _item(5, "hard", "long", None),
           _item(6, "hard", "long", "A")]


def test_result_row_is_result_pys() -> None:
    row = protocol.result_row(CRAFTED)
    assert (row.overall, row.easy, row.hard, row.short, row.medium, row.long) == (57.1, 66.7, 50.0, 50.0, 50.0, 66.7)
    assert row.counts == {"overall": 7, "easy": 3, "hard": 4, "short": 2, "medium": 2, "long": 3}
    comp = protocol.result_row(CRAFTED, compensated=True)  # the missing answer counts 0.25
    assert comp.overall == round(100 * 4.25 / 7, 1) and comp.hard == round(100 * 2.25 / 4, 1) == 56.2
    # an unknown difficulty counts as hard and an unknown length as long, as result.py's else branches
    odd = protocol.result_row([_item(0, "?", "?", "A")])
    assert (odd.hard, odd.long, odd.easy, odd.short) == (100.0, 100.0, None, None)


def test_score_dir_reads_jsonl_and_json_and_writes_result_txt(tmp_path: Path) -> None:
    (tmp_path / "model.jsonl").write_text("\n".join(json.dumps(x) for x in CRAFTED) + "\n")
    (tmp_path / "model_cot.json").write_text(json.dumps(CRAFTED[:2]))
    table = score_prediction_dir(tmp_path)
    assert table["model"]["Overall"] == 57.1 and table["model_cot"]["Overall"] == 50.0
    assert table["model_cot"]["Long"] is None  # result.py would divide by zero
    lines = (tmp_path / "result.txt").read_text().split("\n")
    assert lines == ["Model\tOverall\tEasy\tHard\tShort\tMedium\tLong", "model\t57.1\t66.7\t50.0\t50.0\t50.0\t66.7",
                     "model_cot\t50.0\t50.0\t-\t100.0\t0.0\t-"]
    again = score_prediction_dir(tmp_path)  # its own outputs are not read as predictions
    assert again == table


def test_score_dir_refuses_bad_files(tmp_path: Path) -> None:
    with pytest.raises(EvaluatorError, match="no prediction files"):
        score_prediction_dir(tmp_path)
    (tmp_path / "m.jsonl").write_text('{"judge": true}\n')
    with pytest.raises(EvaluatorError, match="lacks"):
        score_prediction_dir(tmp_path)
    (tmp_path / "m.jsonl").write_text('{"judge": true, "difficulty": "easy", "length": "short"}\nnot json\n')
    with pytest.raises(EvaluatorError, match="m.jsonl:2"):
        score_prediction_dir(tmp_path)


def test_lctx_score_longbench_v2(tmp_path: Path) -> None:
    (tmp_path / "m.jsonl").write_text("\n".join(json.dumps(x) for x in CRAFTED))
    out = subprocess.run([sys.executable, "-m", "cli.main", "score", "longbench-v2", "--pred-dir", str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    assert json.loads(out[: out.rindex("}") + 1])["m"]["Overall"] == 57.1


FRAGMENTS = ["The correct answer is (A)", "The correct answer is B", "The correct answer is (", "C)", "D", "*", " ",
             "so", "(B)", "\n"]


@settings(max_examples=400, deadline=None)
@given(head=st.lists(st.sampled_from(FRAGMENTS), max_size=6), tail=st.lists(st.sampled_from(FRAGMENTS), max_size=6))
def test_a_decided_answer_is_extracted_the_same_whatever_follows(head, tail) -> None:
    """`stop_when_decided`: once the parenthesised phrase is there, more text cannot change
    what extract_answer takes; the bare form alone does not decide."""
    text = "".join(head)
    if protocol.answer_decided(text):
        assert protocol.extract_answer(text + "".join(tail)) == protocol.extract_answer(text) is not None


def test_answer_decided_needs_the_parenthesised_phrase() -> None:
    assert protocol.answer_decided("Thus **The correct answer is (C)** because")
    assert not protocol.answer_decided("The correct answer is C")  # a later "(D)" phrase would win
    assert not protocol.answer_decided("The correct answer is (C")
