"""LongBench's metrics on hand-computed cases: the official rules (first line, max over
answers, x 100) and per-pair functions, Chinese F1 and ROUGE, code similarity skipping
comment lines."""

from __future__ import annotations

import pytest

from evaluators.longbench.metrics import (
    longbench_bucket,
    longbench_dataset_score,
    longbench_e_scores,
    longbench_sample_score,
)

CLASSES = ["Location", "City", "Country", "Individual"]


def test_first_line_rule_for_classification() -> None:
    # First line only: "Location" alone matches; both lines would match two classes (score 1/2).
    assert longbench_sample_score("trec", "classification_score", "\nLocation\nCity", ["Location"], CLASSES) == 1.0
    # The same prediction on a dataset without the rule keeps both lines.
    assert longbench_sample_score("lsht_like", "classification_score", "Location\nCity", ["Location"],
                                  CLASSES) == 0.5


def test_classification_with_several_matches_and_substrings() -> None:
    assert longbench_sample_score("trec", "classification_score", "City or Country", ["City"], CLASSES) == 0.5
    # A class contained in the gold label ("location" in "Other location") is not counted twice.
    classes = ["Other location", "location", "City"]
    assert longbench_sample_score("trec", "classification_score", "Other location", ["Other location"],
                                  classes) == 1.0
    assert longbench_sample_score("trec", "classification_score", "Sport", ["City"], CLASSES) == 0.0


def test_retrieval_and_count_with_several_numbers() -> None:
    assert longbench_sample_score("passage_retrieval_en", "retrieval_score", "Paragraph 3 or Paragraph 5",
                                  ["Paragraph 3"], None) == 0.5
    assert longbench_sample_score("passage_retrieval_zh", "retrieval_zh_score", "段落2", ["段落2"], None) == 1.0
    assert longbench_sample_score("passage_count", "count_score", "2 or 3 or 2", ["2"], None) == pytest.approx(2 / 3)
    assert longbench_sample_score("passage_count", "count_score", "none", ["2"], None) == 0.0


def test_code_similarity_skips_comment_lines() -> None:
    pred = "# a comment\n// another\n```python\n    return a - b\nprint(1)"
    assert longbench_sample_score("lcc", "code_sim_score", pred, ["    return a - b"], None) == 1.0
    # fuzz.ratio: matching blocks "return a" and "b", 9 of 10 + 12 characters: round(200 * 9 / 22) = 82
    assert longbench_sample_score("lcc", "code_sim_score", "return a+b", ["return a - b"], None) == 0.82


@pytest.mark.parametrize(("pred", "official"), [
    ("# note\n\n    x = foo(2)", 0.0),  # the blank line after the comment is the official first code line
    ("\n\n   \n    x = foo(2)", 0.35),  # leading newlines go, the line of three spaces stays: 2*3/(3+14)
    ("\n# note\n    x = foo(2)\n", 1.0),  # here the official rule and lm-eval's agree
])
def test_code_similarity_takes_the_official_first_line_not_lm_evals(pred: str, official: float) -> None:
    """LongBench's metrics.py: `prediction.lstrip('\\n').split('\\n')`, the first line without
    a backtick, '#' or '//' (blank lines included); lm-eval 0.4.13 skips blank lines."""
    import lm_eval.tasks.longbench.metrics as lb

    gold = "    x = foo(2)"
    assert longbench_sample_score("lcc", "code_sim_score", pred, [gold], None) == pytest.approx(official, abs=0.01)
    assert lb.code_sim_score(pred, gold) == 1.0  # what lm-eval would have given


def test_english_f1_max_over_answers() -> None:
    # "the penn treebank corpus" vs "penn treebank": P = 2/3, R = 1, F1 = 0.8; vs "PTB": 0.
    assert longbench_sample_score("qasper", "qa_f1_score", "The Penn Treebank corpus.",
                                  ["PTB", "the Penn Treebank"], None) == pytest.approx(0.8)


def test_chinese_f1_and_rouge() -> None:
    # jieba: 北京/是/中国/的/首都 vs 中国/的/首都 -> P = 3/5, R = 1, F1 = 0.75; LCS the same three tokens.
    assert longbench_sample_score("multifieldqa_zh", "qa_f1_zh_score", "北京是中国的首都", ["中国的首都"],
                                  None) == pytest.approx(0.75)
    assert longbench_sample_score("dureader", "rouge_zh_score", "北京是中国的首都", ["中国的首都"],
                                  None) == pytest.approx(0.75, abs=1e-6)


def test_english_rouge_l_and_errors_score_zero() -> None:
    # LCS "cat sat": P = 2/3, R = 2/5, F = 0.5
    assert longbench_sample_score("gov_report", "rouge_score", "the cat sat", ["a cat sat on mat"],
                                  None) == pytest.approx(0.5, abs=1e-6)
    assert longbench_sample_score("gov_report", "rouge_score", "", ["a cat"], None) == 0.0  # rouge raises: 0


def test_dataset_score_and_buckets() -> None:
    assert longbench_dataset_score([1.0, 0.5, 0.0]) == 50.0
    assert longbench_dataset_score([1 / 3]) == 33.33
    assert longbench_dataset_score([]) is None
    assert [longbench_bucket(n) for n in (0, 3999, 4000, 7999, 8000)] == ["0-4k", "0-4k", "4-8k", "4-8k", "8k+"]
    assert longbench_e_scores([1.0, 0.0, 0.5], [100, 5000, 5001]) == {"0-4k": 100.0, "4-8k": 25.0, "8k+": None}
