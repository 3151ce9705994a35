"""evaluate.py's scoring on hand-computed cases, the effective lengths and intervals on
constructed scores, and `lctx score ruler` on files in RULER's prediction layout (its
summary.csv compared with the frame evaluate.py writes through pandas)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli.main import main
from evaluators.errors import EvaluatorError
from evaluators.ruler import scoring, summary
from evaluators.ruler.evaluator import typed
from evaluators.ruler.options import RulerOptions


def test_postprocess_strips_and_turns_control_characters_into_newlines() -> None:
    assert scoring.postprocess("\u00a0 Answer:\t42\x1f\n ") == "Answer:\n42"
    assert scoring.postprocess("\u200bx") == "\u200bx"  # not Python whitespace: kept
    assert scoring.postprocess(" \x00\n ") == ""


def test_string_match_all_partial_credit_case_and_substrings() -> None:
    preds = ["The numbers are 1234567 and 7654321.", "none here", "VALUE-A", "11826341290"]
    refs = [["1234567", "7654321", "1111111", "2222222"], ["x"], ["value-a"], ["2634129"]]
    # (2/4 + 0 + 1 + 1) / 4 * 100 = 62.5
    assert scoring.string_match_all(preds, refs) == 62.5
    assert scoring.string_match_all(["Straße"], [["STRASSE"]]) == 0.0  # lower(), not casefold
    assert scoring.string_match_all(["a a"], [["a", "a", "b"]]) == 66.67  # duplicates count separately


def test_string_match_part_any_reference_no_partial_credit() -> None:
    refs = [["Santa Clara, California", "Levi's Stadium", "Levi's Stadium in the San Francisco Bay Area at "
             "Santa Clara, California."], ["no"], ["Paris"]]
    preds = ["levi's stadium", "I don't know", ""]
    assert scoring.string_match_part(preds, refs) == 66.67  # (1 + 1 + 0) / 3, "no" inside "don't know"


@settings(max_examples=300, deadline=None)
@given(metric=st.sampled_from(sorted(scoring.SAMPLE_METRICS)),
       refs=st.lists(st.text("abcXYZ0123-", min_size=1, max_size=4), min_size=1, max_size=3),
       head=st.text("abcXYZ0123- \n\t\x01", max_size=30), tail=st.text("abcXYZ0123- \n\t\x01", max_size=30))
def test_a_decided_prediction_scores_the_same_whatever_follows(metric, refs, head, tail) -> None:
    """`stop_when_decided`'s rule: once `decided` holds, more text cannot move the score, so
    stopping there scores what the whole budget would have."""
    sample = scoring.SAMPLE_METRICS[metric]
    if scoring.decided(metric, refs)(head):
        assert sample(scoring.postprocess(head + tail), refs) == sample(scoring.postprocess(head), refs) == 1.0


def test_decided_only_once_the_score_is_one() -> None:
    assert scoring.decided("string_match_all", ["7431", "88"])(" The numbers are 7431 and 88.")
    assert not scoring.decided("string_match_all", ["7431", "88"])(" The numbers are 7431 and 8")
    assert scoring.decided("string_match_part", ["lake 3", "into lake 3"])("It flows into Lake 3")
    assert not scoring.decided("string_match_part", ["lake 3"])("It flows into lake")


def test_rounding_is_pythons() -> None:
    assert scoring.corpus_score([1.0] * 17 + [0.0] * 15) == round(17 / 32 * 100, 2) == 53.12


def test_effective_length_threshold_and_relative_rule() -> None:
    averages = {4096: 95.0, 8192: 85.56, 16384: 86.0, 32768: 70.0}
    eff = summary.effective_length(averages)
    assert eff["length"] == 16384 and eff["passing"] == [4096, 8192, 16384]  # 85.56 rounds to 85.6
    assert summary.effective_length({4096: 85.54})["length"] is None
    gap = summary.effective_length({4096: 90.0, 8192: 80.0, 16384: 88.0})
    assert gap["length"] == 16384 and gap["fails_before_longer_pass"] == [8192]
    rel = summary.relative_effective_length({1024: 40.0, 2048: 34.0, 4096: 33.9})
    assert rel["length"] == 2048 and rel["floor"] == pytest.approx(34.0)
    assert summary.relative_effective_length({1024: 0.0, 2048: 0.0})["length"] is None
    w = summary.weighted_averages({1: 10.0, 2: 40.0})
    assert w == {"avg": 25.0, "wavg_inc": pytest.approx(30.0), "wavg_dec": pytest.approx(20.0)}


def test_intervals_cover_the_score_are_seeded_and_shrink_with_samples() -> None:
    rng = np.random.default_rng(0)
    small = list((rng.random(40) < 0.7).astype(float))
    large = list((rng.random(800) < 0.7).astype(float))
    cells = {("niah_single_1", 1024): small, ("vt", 1024): large}
    ci, avg = summary.intervals(cells, 2000, seed=42)
    for key, values in cells.items():
        lo, hi = ci[key]
        assert lo <= 100 * np.mean(values) <= hi
    width = {k: v[1] - v[0] for k, v in ci.items()}
    assert width[("vt", 1024)] < width[("niah_single_1", 1024)] / 2
    assert summary.intervals(cells, 2000, seed=42) == (ci, avg)
    assert summary.intervals(cells, 2000, seed=43)[0] != ci
    # a cell's interval does not depend on which other cells ran
    assert summary.intervals({("vt", 1024): large}, 2000, seed=42)[0][("vt", 1024)] == ci[("vt", 1024)]
    mean = (100 * np.mean(small) + 100 * np.mean(large)) / 2
    assert avg[1024][0] <= mean <= avg[1024][1]


def test_typed_result_averages_the_task_scores_per_length() -> None:
    cells = {("niah_single_1", 1024): [1.0, 1.0, 0.5, 1.0], ("qa_1", 1024): [1.0, 0.0],
             ("niah_single_1", 2048): [0.0, 1.0, 0.0, 0.0], ("qa_1", 2048): [0.0, 0.0]}
    options = RulerOptions(threshold=85.6, bootstrap=200, seed=42, template="base")
    result = typed(cells, {("qa_1", 2048): 2}, options)
    avg = {p.key: p.value for s in result.series if s.name == "average" for p in s.points}
    assert avg == {1024: (87.5 + 50.0) / 2, 2048: (25.0 + 0.0) / 2}
    assert result.metric("average").value == pytest.approx((68.75 + 12.5) / 2)
    assert result.metric("effective_length").value is None  # 68.75 < 85.6
    assert result.extra["nulls"]["qa_1"] == {"1024": "0/2", "2048": "2/2"}
    assert set(result.extra["intervals"]["cells"]["qa_1"]) == {"1024", "2048"}


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def pred(i: int, pred: str, outputs: list[str], **extra: object) -> dict:
    return {"index": i, "pred": pred, "input": f"prompt {i}", "outputs": outputs, "others": {}, "truncation": -1,
            "length": -1, **extra}


def test_lctx_score_ruler_on_files_in_rulers_layout(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write_jsonl(tmp_path / "niah_single_1.jsonl", [pred(0, " 1234567 ", ["1234567"]), pred(1, "", ["7654321"]),
                                                  pred(2, "7654321, yes", ["7654321"])])
    # chunks of one task merged in file-name order
    write_jsonl(tmp_path / "qa_1-0.jsonl", [pred(0, "Lake 3", ["lake 3", "into lake 3"], others={"id": "q3"})])
    write_jsonl(tmp_path / "qa_1-1.jsonl", [pred(1, "the sea, with, commas", ["ocean"])])
    write_jsonl(tmp_path / "vt.jsonl", [])
    assert main(["score", "ruler", "--pred-dir", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "summary.json").read_text()) == {"niah_single_1": 66.67, "vt": 0.0, "qa_1": 50.0}
    assert (tmp_path / "qa_1-0.jsonl").exists()
    pandas = pytest.importorskip("pandas")
    results = {"niah_single_1": (66.67, "1/3"), "vt": (0.0, "0/0"), "qa_1": (50.0, "0/2")}
    tasks = list(results)
    expected = tmp_path / "expected.csv"  # evaluate.py's write_evaluation, verbatim in effect
    pandas.DataFrame([["Tasks", *tasks], ["Score", *(results[t][0] for t in tasks)],
                      ["Nulls", *(results[t][1] for t in tasks)]]).to_csv(expected, index=False)
    assert (tmp_path / "summary.csv").read_text() == expected.read_text()
    sub = list(csv.reader((tmp_path / "submission.csv").open()))
    assert sub[0] == ["Task", "ID", "Prediction"] and ["qa_1", "q3", "Lake 3"] in sub
    assert ["qa_1", "1", "the sea, with, commas"] in sub
    assert "niah_single_1" in capsys.readouterr().out


def test_one_task_writes_summary_task_csv(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "fwe.jsonl", [pred(0, "abcdef ghijkl", ["abcdef", "ghijkl", "mnopqr"])])
    out = scoring.score_prediction_dir(tmp_path)
    assert out["scores"] == {"fwe": 66.67} and (tmp_path / "summary-fwe.csv").is_file()


@pytest.mark.parametrize(("row", "message"), [
    ({"index": 0, "pred": None, "input": "x", "outputs": ["a"], "others": {}}, r"fwe.jsonl:1: 'pred' must be a string"),
    ({"index": 0, "pred": "a", "input": "x", "outputs": [], "others": {}}, r"fwe.jsonl:1: 'outputs' must be"),
    ({"index": 0, "pred": "a", "outputs": ["a"], "others": {}}, r"fwe.jsonl:1: .* needs 'input'"),
])
def test_bad_prediction_lines_are_refused_with_file_and_line(tmp_path: Path, row: dict, message: str) -> None:
    write_jsonl(tmp_path / "fwe.jsonl", [row])
    with pytest.raises(EvaluatorError, match=message):
        scoring.score_prediction_dir(tmp_path)


def test_a_folder_without_prediction_files_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["score", "ruler", "--pred-dir", str(tmp_path)]) == 2
    assert "no RULER prediction files" in capsys.readouterr().err
