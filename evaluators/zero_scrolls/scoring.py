"""`lctx score zero-scrolls`: prediction files in the layout ZeroSCROLLS' scripts write and its
leaderboard takes (`preds_<dataset>.json`: {id: prediction}) scored against the validation
outputs of the data directory with each dataset's metric; or an lctx run's samples.jsonl.
Writes result.json: each dataset's score and n, and `average`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.errors import EvaluatorError
from evaluators.zero_scrolls.data import read_rows
from evaluators.zero_scrolls.options import data_file
from evaluators.zero_scrolls.protocol import DATASETS, dataset_score, example_score, references_by_id

OUTPUT = "result.json"


def _predictions(pred_dir: Path) -> dict[str, dict[str, str]]:
    found: dict[str, dict[str, str]] = {}
    for d in DATASETS:
        path = pred_dir / f"preds_{d}.json"
        if path.is_file():
            try:
                preds = json.loads(path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise EvaluatorError(f"{path}: not JSON ({e})") from None
            if not isinstance(preds, dict) or not all(isinstance(v, str) for v in preds.values()):
                raise EvaluatorError(f"{path}: expected {{id: prediction}} (the scripts' preds_<dataset>.json)")
            found[d] = preds
    samples = pred_dir / "samples.jsonl"
    if not found and samples.is_file():
        for line in samples.read_text(encoding="utf-8").splitlines():
            r = json.loads(line) if line.strip() else {}
            if r.get("task") == "zero_scrolls" and isinstance(r.get("prediction"), str):
                found.setdefault(r["dataset"], {})[r["example_id"]] = r["prediction"]
    return found


def score_prediction_dir(pred_dir: Path, data_dir: Path, split: str = "validation") -> dict[str, Any]:
    pred_dir = Path(pred_dir)
    if not pred_dir.is_dir():
        raise EvaluatorError(f"{pred_dir} is not a folder of ZeroSCROLLS prediction files")
    found = _predictions(pred_dir)
    if not found:
        raise EvaluatorError(f"no predictions in {pred_dir}: expected preds_<dataset>.json or an lctx samples.jsonl")
    table: dict[str, Any] = {}
    for d, preds in found.items():
        refs = references_by_id(read_rows(data_file(data_dir, d, split)))
        missing = [i for i in refs if i not in preds]
        unknown = [i for i in preds if i not in refs]
        if missing or unknown:
            raise EvaluatorError(f"{d}: {len(missing)} ids without a prediction (e.g. {missing[:3]}) and {len(unknown)} "
                                 f"predictions of unknown ids (e.g. {unknown[:3]}) against {split}")
        if not any(refs.values()):
            raise EvaluatorError(f"{d} {split} has no reference outputs (the test split's are withheld)")
        table[d] = dataset_score(d, [example_score(d, preds[i], r) for i, r in refs.items()])
    values = [v["score"] for v in table.values() if v["score"] is not None]
    table["average"] = sum(values) / len(values)
    write_json_atomic(pred_dir / OUTPUT, table)
    return table
