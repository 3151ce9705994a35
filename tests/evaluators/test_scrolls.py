"""SCROLLS: rows grouped by id, truncation keeps the query, the official metric
dict for existing predictions, and an end-to-end run on a tiny model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoints.tokenizer import ByteTokenizer
from evaluators import EvaluatorError, run_task, validate_task
from evaluators.data import group_by_id, load_scrolls
from evaluators.scrolls import score_predictions_file, truncate_end
from tests.evaluators.helpers import points, tiny_model, typed

DATA = Path(__file__).parent / "data" / "scrolls"


def test_rows_sharing_an_id_are_one_example() -> None:
    ex = group_by_id(load_scrolls("qasper", "validation", DATA))
    assert [e["id"] for e in ex] == ["q1", "q2"]
    assert ex[0]["outputs"] == ["funding for three new schools", "three new schools and a library"]


def test_truncation_keeps_the_query() -> None:
    tok = ByteTokenizer()
    text = "What was approved?\n\n" + "document " * 50
    ids, truncated = truncate_end(tok, text, 40)
    assert truncated and len(ids) == 40 and tok.decode(ids).startswith("What was approved?\n\n")


def test_official_metric_dict_for_predictions(tmp_path: Path) -> None:
    preds = tmp_path / "p.json"
    preds.write_text(json.dumps({"q1": "three new schools", "q2": "on Tuesday"}))
    out = score_predictions_file("qasper", preds, DATA)
    # q1: P = 1, R = 3/5 against either reference -> 75; q2: "on tuesday" vs "tuesday": P = 1/2, R = 1 -> 66.67
    assert out["f1"] == pytest.approx((75.0 + 200 / 3) / 2)
    assert out["scrolls_score"] == out["f1"] and out["num_predicted"] == 2
    preds.write_text(json.dumps({"g1": "The committee approved funding for new schools and a library."}))
    out = score_predictions_file("gov_report", preds, DATA)
    assert out["rouge/rouge1"] == pytest.approx(100.0) and out["rouge/geometric_mean"] == pytest.approx(100.0)
    assert out["display_keys"] == ["rouge/rouge1", "rouge/rouge2", "rouge/rougeL"]
    preds.write_text(json.dumps({"q1": "x"}))
    with pytest.raises(EvaluatorError, match="no prediction"):
        score_predictions_file("qasper", preds, DATA)


def test_metric_dict_has_the_official_keys_and_rounding(tmp_path: Path) -> None:
    """The `tau/scrolls` metric script rounds every figure to 4 decimals and adds
    scrolls_score, display_keys and display."""
    preds = tmp_path / "p.json"
    preds.write_text(json.dumps({"q1": "three new schools", "q2": "on Tuesday"}))
    out = score_predictions_file("qasper", preds, DATA)
    # (75 + 66.666...) / 2 = 70.8333...
    assert out == {"f1": 70.8333, "num_predicted": 2, "mean_prediction_length_characters": 13.5,
                   "scrolls_score": 70.8333, "display_keys": ["f1"], "display": [70.8333]}


def test_options() -> None:
    assert validate_task({"name": "scrolls"})["tasks"] == [
        "gov_report", "summ_screen_fd", "qmsum", "qasper", "narrative_qa", "quality", "contract_nli"]
    assert validate_task({"name": "scrolls", "datasets": ["quality"]})["tasks"] == ["quality"]
    with pytest.raises(EvaluatorError, match="tasks.0: Input should be 'gov_report'"):
        validate_task({"name": "scrolls", "tasks": ["squad"]})
    with pytest.raises(EvaluatorError, match="split"):
        validate_task({"name": "scrolls", "split": "dev"})


def test_scrolls_end_to_end_on_a_tiny_model(tmp_path: Path) -> None:
    loaded = tiny_model(tmp_path / "m")
    task = {"name": "scrolls", "max_length": 200, "max_new_tokens": 8}  # all seven tasks
    result = run_task(loaded, task, tmp_path / "out", data_dir=DATA)
    records = [json.loads(x) for x in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    ids = sorted(r["id"] for r in records)
    assert len(ids) == 8 and {"scrolls/qasper/q1", "scrolls/qasper/q2", "scrolls/narrative_qa/n1"} <= set(ids)
    assert all(r["prompt_tokens"] <= 192 for r in records)
    assert [r["truncated"] for r in records if r["id"] == "scrolls/gov_report/g1"] == [True]
    assert [r["references"] for r in records if r["id"] == "scrolls/narrative_qa/n1"] == [
        ["His daughter.", "The sailor's daughter"]]  # two rows, one example
    scores = points(result, "score", "dataset")
    assert len(scores) == 7 and sum(p.n for p in scores.values()) == len(ids) == 8
    assert set(typed(result).extra["tasks"]["gov_report"]) >= {"rouge1", "rouge2", "rougeL", "score"}
    assert typed(result).metric("score").value == pytest.approx(sum(p.value for p in scores.values()) / 7)
