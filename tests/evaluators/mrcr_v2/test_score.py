"""`lctx score mrcr_v2` on prediction files made elsewhere: run_evaluation.py's metric in both
views, read independently here (difflib's ratio after the last hash), and an lctx samples.jsonl
read as it is."""

from __future__ import annotations

import json
from difflib import SequenceMatcher
from pathlib import Path

import pytest

from cli.main import main
from evaluators.errors import EvaluatorError
from evaluators.mrcr_v2.options import file_name
from evaluators.mrcr_v2.scoring import score_prediction_dir

HASH = "a1B2c3D4e5F6"
ANSWER = f"{HASH} The sea is wide and the ship is small."


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def test_scores_both_views_and_counts_rows_beyond_the_context(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    at_8k, at_16k = file_name(8, "8K"), file_name(8, "16K")
    said = "The sea is wide, the ship is small."
    _write(tmp_path / "model-a.jsonl", [
        {"answer": ANSWER, "data_file": at_8k, "response": f"{HASH} {said}"},   # hash first
        {"answer": ANSWER, "data_file": at_8k, "response": f"Sure! {HASH} {said}"},  # hash later: code scores it
        {"answer": ANSWER, "data_file": at_16k, "response": "no hash here"},
        {"answer": ANSWER, "data_file": at_16k, "beyond_context": True},
    ])
    assert main(["score", "mrcr_v2", "--pred-dir", str(tmp_path)]) == 0
    out = json.loads((tmp_path / "result.json").read_text())["model-a"]
    ratio = SequenceMatcher(a="The sea is wide and the ship is small.", b=said).ratio()
    assert out["8needle"]["8K"]["score"] == pytest.approx(ratio)
    assert out["8needle"]["8K"]["score_hash_first"] == pytest.approx(ratio / 2)
    assert out["8needle"]["8K"]["hash_later"] == 1
    assert out["8needle"]["16K"] == {"score": 0.0, "score_hash_first": 0.0, "n": 1, "beyond": 1,
                                     "hash_missing": 1, "hash_later": 0}
    assert out["8needle_upto"]["16K"]["score"] == pytest.approx(2 * ratio / 3)  # 8K and 16K pooled
    assert "wrote" in capsys.readouterr().out


def test_an_lctx_samples_file_reads_as_it_is_and_a_bad_line_is_named(tmp_path: Path) -> None:
    _write(tmp_path / "samples.jsonl", [{"needles": 2, "length": "upto_128K", "references": [ANSWER],
                                         "prediction": ANSWER, "beyond_context": False}])
    assert score_prediction_dir(tmp_path)["samples"]["2needle"]["upto_128K"]["score"] == 1.0
    _write(tmp_path / "samples.jsonl", [{"needles": 3, "length": "8K", "answer": ANSWER, "response": ANSWER}])
    with pytest.raises(EvaluatorError, match=r"samples.jsonl:1: needs one JSON object"):
        score_prediction_dir(tmp_path)
