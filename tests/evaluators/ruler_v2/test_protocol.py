"""RULER v2's scorers against an independent reading of NeMo-Skills' eval_ruler2 and
eval_mcq (branch chsieh/ruler2, 991a7432) on crafted generations: every route, every branch
of post-processing, WER, the Document stripping and the boxed-letter extraction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main
from evaluators.ruler_v2 import protocol
from evaluators.ruler_v2.protocol import extract_letter, route, score_one


def test_routes_as_prepare_task_for_ns() -> None:
    assert [route(t) for t in protocol.TASKS] == [
        "all", "all", "multichoice", "multichoice", "all", "all", "2steps", "all", "part", "part", "part", "part"]


def read_wer(h: str, r: str) -> float:
    """Word edit distance by the textbook table (independent of protocol._edits)."""
    a, b = h.split(), r.split()
    d = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) + 1):
        d[i][0] = i
    for j in range(len(b) + 1):
        d[0][j] = j
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
    return d[len(a)][len(b)] / len(b) if b else float("inf")


@pytest.mark.parametrize(("h", "r"), [("a b c", "a b c"), ("a x c", "a b c"), ("", "a b"), ("a b c d e", "a"),
                                      ("b a", "a b"), ("the cat sat", "a cat sat on mat")])
def test_wer_is_word_edits_over_reference_words(h: str, r: str) -> None:
    assert protocol.wer(h, r) == pytest.approx(read_wer(h, r))


CASES = [
    # (task, generation, expected, score, why)
    ("mk_niah_basic", "The special magic number is 1234567890.", ["1234567890"], 1.0, "all: substring"),
    ("mk_niah_basic", "NUMBER 1234567890", ["number 1234567890"], 1.0, "all: lower-cased"),
    ("mv_niah_basic", "1111 and 2222", ["1111", "2222", "3333", "4444"], 0.5, "all: mean over references"),
    ("mv_niah_basic", "x", ["a b"], 0.0, "all: 1 - WER below 0 loses to the 0 substring score"),
    ("mk_niah_easy", "alpha beta gamma", ["alpha beta delta"], 1 - 1 / 3, "all: 1 - WER when no substring"),
    ("mk_niah_basic", "<think>1234567890</think> none", ["1234567890"], 0.0, "after the last </think>"),
    ("mk_niah_basic", "1234567890. Answer: unknown", ["1234567890"], 0.0, "after the last 'Answer:'"),
    ("mk_niah_basic", "\x01 1234567890\x02", ["1234567890"], 1.0, "control characters do not matter to a substring"),
    ("mk_niah_basic", "", [""], 1.0, "an empty reference is in every prediction"),
    ("mv_niah_medium", "Document 3 is it.\n\nanswer 42", ["42"], 1.0, "2steps: the last paragraph"),
    ("mv_niah_medium", "42\n\nsomething else", ["42"], 0.0, "2steps: earlier paragraphs are ignored"),
    ("qa_hard", "Document 1:\nParis is big.\n\nThe answer is Paris", ["paris"], 1.0, "part: after the documents"),
    ("qa_hard", "Document 1:\nParis\n\nI do not know", ["Paris"], 0.0, "part: a copied document is removed"),
    ("qa_hard", "London or Paris", ["Rome", "Paris"], 1.0, "part: the best reference"),
    ("qa_basic", "Document 2:\nthe text\n", ["the text"], 1.0, "part: a block without the blank line stays"),
    ("mk_niah_medium", "so \\boxed{B}", "B", 1.0, "mcq: boxed letter"),
    ("mk_niah_medium", "\\boxed{A} then \\boxed{C}", "C", 1.0, "mcq: the last boxed"),
    ("mk_niah_medium", "\\boxed{The answer is D}", "D", 1.0, "mcq: the last standalone letter inside"),
    ("mk_niah_hard", "\\boxed{42}", "B", 0.0, "mcq: no letter inside: kept as it is"),
    ("mk_niah_hard", "**Answer:** C", "C", 1.0, "mcq: no boxed, 'Answer: X'"),
    ("mk_niah_hard", "answer: c", "C", 0.0, "mcq: the letter is case-sensitive"),
    ("mk_niah_hard", "\\boxed{", "A", 0.0, "mcq: an unclosed box, no Answer line"),
    ("mk_niah_hard", "\\boxed{} Answer: A", "A", 0.0, "mcq: an empty box is an answer (no fallback)"),
]


@pytest.mark.parametrize(("task", "gen", "expected", "want", "why"), CASES, ids=[c[4] for c in CASES])
def test_each_branch(task, gen, expected, want, why) -> None:
    assert score_one(task, gen, expected).score == pytest.approx(want), why


def test_extract_letter_and_default_parse() -> None:
    assert extract_letter("\\boxed {A}") is None  # not "\boxed{": the assertion fails
    assert extract_letter("\\boxed{\\text{B}}") == "B"
    assert extract_letter("nothing") is None
    assert score_one("mk_niah_basic", " a\x01b ", ["x"]).predicted_answer == "a\nb"


def test_lctx_score_reads_nemo_skills_outputs(tmp_path: Path) -> None:
    root = tmp_path / "eval-results"
    lines = {"mk_niah_basic": [{"generation": "1234", "expected_answer": ["1234"]},
                               {"generation": "no", "expected_answer": ["5678"]}],
             "mk_niah_medium": [{"generation": "\\boxed{B}", "expected_answer": "B"}]}
    for task, rows in lines.items():
        folder = root / f"ruler2.llama_4096.{task}"
        folder.mkdir(parents=True)
        (folder / "output.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert main(["score", "ruler-v2", "--pred-dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "result.json").read_text())["llama_4096"]
    assert result["mk_niah_basic"] == {"accuracy": 50.0, "n": 2} and result["mk_niah_medium"]["accuracy"] == 100.0
    assert result["ruler2"] == {"accuracy": 75.0, "tasks": 2, "all_tasks": False}
