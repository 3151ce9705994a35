"""RULER's scoring as NVIDIA's scripts/eval/evaluate.py does it (docs/protocols/ruler.md
section 7 "Scoring", section 6 "Sample and prediction files"): post-processing,
string_match_all / string_match_part, null counts, summary.csv, submission.csv, and
`lctx score ruler --pred-dir DIR` (plus summary.json = {task: score}). Standard library only."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evaluators.data import json_objects
from evaluators.errors import EvaluatorError
from evaluators.ruler.options import RULER_TASKS

_CONTROL = re.compile(r"[\x00-\x1f]")


def postprocess(pred: str) -> str:
    """evaluate.py's postprocess_pred: strip, control characters to newlines, strip."""
    return _CONTROL.sub("\n", pred.strip()).strip()


def sample_all(pred: str, refs: list[str]) -> float:
    """string_match_all of one sample: the share of references found, case-insensitively."""
    return sum([1.0 if r.lower() in pred.lower() else 0.0 for r in refs]) / len(refs)


def sample_part(pred: str, refs: list[str]) -> float:
    """string_match_part of one sample: 1 if any reference is found."""
    return max([1.0 if r.lower() in pred.lower() else 0.0 for r in refs])


SAMPLE_METRICS = {"string_match_all": sample_all, "string_match_part": sample_part}


def corpus_score(per_sample: list[float]) -> float:
    """evaluate.py's task score from per-sample values: sum / n * 100, rounded to 2 (Python round)."""
    return round(sum(per_sample) / len(per_sample) * 100, 2)


def string_match_all(preds: list[str], refs: list[list[str]]) -> float:
    return corpus_score([sample_all(p, r) for p, r in zip(preds, refs, strict=True)])


def string_match_part(preds: list[str], refs: list[list[str]]) -> float:
    return corpus_score([sample_part(p, r) for p, r in zip(preds, refs, strict=True)])


def decided(metric: str, refs: list[str]) -> Callable[[str], bool]:
    """When a prediction's score can no longer change, whatever text follows: both metrics
    only ever gain from more text (a reference found stays found; post-processing strips
    and maps control characters one by one), so a prediction is decided once it scores 1."""
    sample = SAMPLE_METRICS[metric]
    return lambda text: sample(postprocess(text), refs) == 1.0


def metric_of(task: str) -> str:
    return "string_match_part" if task in ("qa_1", "qa_2") else "string_match_all"


# --- prediction files ------------------------------------------------------------------

_CHUNK = re.compile(r".*[^_]+-\d+\.jsonl")


def prediction_files(pred_dir: Path) -> dict[str, list[tuple[Path, int, dict[str, Any]]]]:
    """Lines per task: `<task>.jsonl`, or its chunks `<task>-<k>.jsonl` merged in file-name
    order as evaluate.py's aggregate_chunk merges them (lctx leaves the chunk files in place)."""
    names = sorted(p.name for p in pred_dir.iterdir() if p.suffix == ".jsonl")
    chunks: dict[str, list[str]] = {}
    for name in names:
        if _CHUNK.match(name):
            chunks.setdefault("-".join(name.split("-")[:-1]), []).append(name)
    out: dict[str, list[tuple[Path, int, dict[str, Any]]]] = {}
    for task in RULER_TASKS:
        files = chunks.get(task) or ([f"{task}.jsonl"] if f"{task}.jsonl" in names else [])
        if files:
            out[task] = [(pred_dir / f, n, rec) for f in files for n, rec in json_objects(pred_dir / f, "a prediction")]
    return out


def score_lines(task: str, lines: list[tuple[Path, int, dict[str, Any]]]) -> dict[str, Any]:
    """One task as run_evaluation_per_task scores it: score, nulls "k/n", post-processed
    predictions and ids. Lines NVIDIA's script would crash on are refused with file and line."""
    preds, refs, ids = [], [], []
    for path, lineno, rec in lines:
        where = f"{path}:{lineno}"
        for key in ("input", "pred", "others", "index"):
            if key not in rec:
                raise EvaluatorError(f"{where}: a RULER prediction needs {key!r} (fields: index, pred, input, "
                                     "outputs, others, truncation, length)")
        if not isinstance(rec["pred"], str):
            raise EvaluatorError(f"{where}: 'pred' must be a string (write '' for no answer), got {rec['pred']!r:.40}")
        if not isinstance(rec["others"], dict):
            raise EvaluatorError(f"{where}: 'others' must be an object ({{}} when there is nothing)")
        ref = rec.get("outputs", [rec.get("output", "")])
        if not isinstance(ref, list) or not ref:
            raise EvaluatorError(f"{where}: 'outputs' must be a non-empty list of reference strings")
        preds.append(postprocess(rec["pred"]))
        refs.append(ref)
        ids.append(rec["others"].get("id", rec["index"]))
    nulls = f"{sum(len(p) == 0 for p in preds)}/{len(preds)}"
    if refs and refs[0][0] is not None:
        for (path, lineno, _), ref in zip(lines, refs, strict=True):
            if not all(isinstance(r, str) for r in ref):
                raise EvaluatorError(f"{path}:{lineno}: every reference in 'outputs' must be a string")
        fn = string_match_part if metric_of(task) == "string_match_part" else string_match_all
        score = fn(preds, refs)
    else:  # an empty file, or a first sample whose references start with null: 0.0 as evaluate.py gives
        score = 0.0
    return {"score": score, "nulls": nulls, "predicts": preds, "indices": ids}


def write_summary_csv(pred_dir: Path, results: dict[str, dict[str, Any]]) -> Path:
    """evaluate.py's write_evaluation: a pandas frame written with index=False (header 0..N,
    rows Tasks / Score / Nulls); `summary-<task>.csv` when only one task was scored."""
    tasks = list(results)
    rows = [["Tasks", *tasks], ["Score", *(results[t]["score"] for t in tasks)],
            ["Nulls", *(results[t]["nulls"] for t in tasks)]]
    path = pred_dir / ("summary.csv" if len(tasks) > 1 else f"summary-{tasks[0]}.csv")
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(range(len(tasks) + 1))
        w.writerows(rows)
    return path


def write_submission_csv(pred_dir: Path, results: dict[str, dict[str, Any]]) -> Path:
    path = pred_dir / "submission.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["Task", "ID", "Prediction"])
        for task, r in results.items():
            w.writerows([task, i, p] for i, p in zip(r["indices"], r["predicts"], strict=True))
    return path


def score_prediction_dir(pred_dir: Path) -> dict[str, Any]:
    """Score `DIR/<task>.jsonl` files in RULER's layout; writes DIR/summary.json ({task:
    score}), DIR/summary.csv (or summary-<task>.csv) and DIR/submission.csv. Returns
    {"scores": {task: score}, "nulls": {task: "k/n"}, "files": [paths written]}."""
    pred_dir = Path(pred_dir)
    if not pred_dir.is_dir():
        raise EvaluatorError(f"{pred_dir} is not a folder; give the folder holding <task>.jsonl prediction files")
    lines = prediction_files(pred_dir)
    if not lines:
        raise EvaluatorError(f"no RULER prediction files in {pred_dir}: expected <task>.jsonl (as NVIDIA's "
                             f"call_api.py writes them) for tasks {', '.join(RULER_TASKS)}")
    results = {task: score_lines(task, ls) for task, ls in lines.items()}
    scores = {t: r["score"] for t, r in results.items()}
    summary = pred_dir / "summary.json"
    summary.write_text(json.dumps(scores, indent=2) + "\n", encoding="utf-8")
    files = [summary, write_summary_csv(pred_dir, results), write_submission_csv(pred_dir, results)]
    return {"scores": scores, "nulls": {t: r["nulls"] for t, r in results.items()},
            "missing": [t for t in RULER_TASKS if t not in lines], "files": [str(p) for p in files]}
