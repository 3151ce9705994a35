"""`lctx score babilong`: collect_results.py's `get_model_results` on a folder of
prediction files in run_model_on_babilong.py's layout, `<task>_<length>_<prompt
name>.csv` (columns target, output, question; pandas' index first). The files are read
with pandas' defaults as collect_results.py reads them (so an output "None" or "NA" is
empty), non-text outputs become text, empty ones ''; each task x length is
100 x correct / rows under metrics.py's compare_answers. One table per prompt
configuration (the name after `<task>_<length>_`); result.json and a heatmap per
configuration are written beside the files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.babilong.protocol import TASK_LABELS, TASKS, compare_answers
from evaluators.errors import EvaluatorError

# collect_results.py's LENGTHS (the column order).
LENGTH_NAMES = ("0k", "1k", "2k", "4k", "8k", "16k", "32k", "64k", "128k", "256k", "512k", "1M", "2M", "10M")


def score_file(path: Path, task: str) -> float:
    import pandas as pd

    df = pd.read_csv(path)
    missing = [c for c in ("target", "output", "question") if c not in df.columns]
    if missing:
        raise EvaluatorError(f"{path}: no column(s) {missing}; run_model_on_babilong.py writes target, output, "
                             "question")
    if df["output"].dtype != object:
        df["output"] = df["output"].astype(str)
    df["output"] = df["output"].fillna("")
    correct = sum(compare_answers(str(t), o, str(q), TASK_LABELS[task])
                  for t, o, q in zip(df["target"], df["output"], df["question"], strict=True))
    return 100 * correct / len(df) if len(df) > 0 else 0


def score_prediction_dir(pred_dir: Path) -> dict[str, Any]:
    """{prompt configuration: {"accuracy": {task: {length: percent}}, "average"}}."""
    from evaluators.plots import heatmap

    pred_dir = Path(pred_dir)
    found: dict[str, dict[str, dict[str, float]]] = {}
    for path in sorted(pred_dir.glob("*.csv")):
        parts = path.stem.split("_")
        if len(parts) < 3 or parts[0] not in TASK_LABELS or parts[1] not in LENGTH_NAMES:
            continue  # collect_results.py would fail on it: another task or a length it does not list
        config = "_".join(parts[2:])
        found.setdefault(config, {}).setdefault(parts[0], {})[parts[1]] = score_file(path, parts[0])
    if not found:
        raise EvaluatorError(f"no BABILong prediction files in {pred_dir}: expected <task>_<length>_<prompt name>.csv "
                             f"(tasks {', '.join(TASKS)}; lengths {', '.join(LENGTH_NAMES)})")
    out: dict[str, Any] = {}
    for config, by_task in sorted(found.items()):
        values = [v for row in by_task.values() for v in row.values()]
        tasks = [t for t in TASKS if t in by_task]
        lengths = [n for n in LENGTH_NAMES if any(n in row for row in by_task.values())]
        out[config] = {"accuracy": {t: {n: by_task[t][n] for n in lengths if n in by_task[t]} for t in tasks},
                       "average": sum(values) / len(values)}
        heatmap(pred_dir / f"babilong_{config}.png", [[by_task[t].get(n) for n in lengths] for t in tasks], lengths,
                tasks, f"BABILong accuracy (%): {config}", "length", "task", vmin=0, vmax=100)
    write_json_atomic(pred_dir / "result.json", out)
    return out
