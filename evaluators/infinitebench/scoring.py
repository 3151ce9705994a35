"""`lctx score infinitebench`: compute_scores.py on a folder of prediction files in the
official layout (`<output_dir>/<model_name>/preds_<task>.jsonl`: one JSON object per line
with the answer under `ground_truth` or `label` and the output under `prediction` or
`pred`, blank lines skipped), or on an lctx run's `samples.jsonl` (its records grouped by
`subtask`). Each task's score is get_score's mean (the fraction compute_scores prints) and
its percent; lctx's corrected value sits beside it where it differs. Writes result.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.errors import EvaluatorError
from evaluators.infinitebench.protocol import TASKS, score_one

OUTPUT = "result.json"
LCTX_SAMPLES = "samples.jsonl"


def _lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise EvaluatorError(f"{path}:{lineno}: not JSON ({e.msg}); the scripts write one object per line") from None
        if not isinstance(item, dict):
            raise EvaluatorError(f"{path}:{lineno}: not a JSON object")
        out.append(item)
    return out


def official_pairs(path: Path) -> list[tuple[str, Any]]:
    """(prediction, label) per line as get_labels and get_preds read them: the label key is
    the first of ground_truth, label that the first line has (a line without it: the
    placeholder "XXXXXXXXXX"), the prediction the first of prediction, pred."""
    items = _lines(path)
    if not items:
        raise EvaluatorError(f"{path} holds no predictions (compute_scores would divide by zero)")
    key = next((k for k in ("ground_truth", "label") if k in items[0]), None)
    if key is None:
        raise EvaluatorError(f"{path}: the first line has neither 'ground_truth' nor 'label' (compute_scores "
                             "raises 'Cannot find label')")
    pairs = []
    for i, item in enumerate(items):
        pred = next((item[k] for k in ("prediction", "pred") if k in item), None)
        if not isinstance(pred, str):
            raise EvaluatorError(f"{path}: prediction {i} has no string 'prediction' or 'pred'")
        pairs.append((pred, item.get(key, "XXXXXXXXXX")))
    return pairs


def task_score(task: str, pairs: list[tuple[str, Any]], model_name: str) -> dict[str, Any]:
    literal, corrected, notes = [], [], 0
    for pred, label in pairs:
        try:
            s = score_one(task, pred, label, model_name)
        except (ValueError, TypeError, IndexError) as e:
            raise EvaluatorError(f"{task}: {e}") from None
        literal.append(s.literal)
        corrected.append(s.corrected)
        notes += s.note is not None
    score = sum(literal) / len(literal)
    out = {"score": score, "percent": round(100 * score, 2), "n": len(pairs)}
    fixed = sum(corrected) / len(corrected)
    if fixed != score:
        out.update(score_corrected=fixed, percent_corrected=round(100 * fixed, 2))
    if notes:
        out["scorer_notes"] = notes
    return out


def _lctx_pairs(path: Path) -> dict[str, list[tuple[str, Any]]]:
    grouped: dict[str, list[tuple[str, Any]]] = {}
    for item in _lines(path):
        if item.get("task") == "infinitebench" and "subtask" in item and "prediction" in item:
            grouped.setdefault(item["subtask"], []).append((item["prediction"], item["references"]))
    return grouped


def score_prediction_dir(pred_dir: Path, model_name: str | None = None) -> dict[str, Any]:
    """{task: score, percent, n (and the corrected values)} with `average` (of the percents);
    writes result.json. `model_name` defaults to the folder's name (compute_scores reads
    <output_dir>/<model_name>/): "gpt4" drops math_calc's first number."""
    pred_dir = Path(pred_dir)
    if not pred_dir.is_dir():
        raise EvaluatorError(f"{pred_dir} is not a folder of InfiniteBench prediction files")
    name = model_name if model_name is not None else pred_dir.name
    found = {t: official_pairs(pred_dir / f"preds_{t}.jsonl") for t in TASKS if (pred_dir / f"preds_{t}.jsonl").is_file()}
    if not found and (pred_dir / LCTX_SAMPLES).is_file():
        found = {t: p for t, p in _lctx_pairs(pred_dir / LCTX_SAMPLES).items() if t in TASKS}
        name = model_name or ""
    if not found:
        raise EvaluatorError(f"no prediction files in {pred_dir}: expected preds_<task>.jsonl (the scripts' layout, "
                             f"tasks {', '.join(TASKS)}) or an lctx run's {LCTX_SAMPLES}")
    table: dict[str, Any] = {t: task_score(t, pairs, name) for t, pairs in found.items()}
    table["average"] = round(sum(v["percent"] for v in table.values()) / len(found), 2)
    table["model_name"] = name
    write_json_atomic(pred_dir / OUTPUT, table)
    return table
