"""`lctx score ruler-v2`: NeMo-Skills' generation files scored as eval_ruler2 / eval_mcq
score them. NeMo-Skills writes each benchmark's generations to
`<output_dir>/eval-results/ruler2.<setup>.<task>/output*.jsonl` (a line per sample with
`generation` and `expected_answer`); lctx reads every `*.jsonl` under the folder whose
parent folder is named `ruler2.<setup>.<task>` (or `<task>` inside a `<setup>` folder), and
an lctx run's `samples.jsonl`. Writes result.json: per setup each task's accuracy (100 x
mean), n, and compute_score's mean over the tasks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.errors import EvaluatorError
from evaluators.ruler_v2.protocol import TASKS, score_one, setup_score, table

OUTPUT = "result.json"


def _where(path: Path) -> tuple[str, str] | None:
    """(setup, task) a generation file belongs to, from its folder's name."""
    name = path.parent.name
    if name.startswith("ruler2.") and name.rsplit(".", 1)[-1] in TASKS:
        setup, task = name[len("ruler2."):].rsplit(".", 1)
        return setup, task
    if name in TASKS:
        return path.parent.parent.name, name
    return None


def _lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise EvaluatorError(f"{path}:{lineno}: not JSON ({e.msg})") from None
    return out


def scored_lines(pred_dir: Path) -> list[dict[str, Any]]:
    """{setup, subtask, score} per generation found under `pred_dir`."""
    out = []
    for path in sorted(Path(pred_dir).rglob("*.jsonl")):
        if path.name == "samples.jsonl":
            for r in _lines(path):
                if r.get("task") == "ruler_v2" and isinstance(r.get("prediction"), str):
                    s = score_one(r["subtask"], r["prediction"], r["references"])
                    out.append({"setup": r["setup"], "subtask": r["subtask"], "score": s.score})
            continue
        where = _where(path)
        if where is None:
            continue
        for i, r in enumerate(_lines(path)):
            if not isinstance(r.get("generation"), str) or "expected_answer" not in r:
                raise EvaluatorError(f"{path}: line {i + 1} lacks 'generation' or 'expected_answer' (NeMo-Skills' "
                                     "generation output)")
            try:
                s = score_one(where[1], r["generation"], r["expected_answer"])
            except ValueError as e:
                raise EvaluatorError(f"{path}: line {i + 1}: {e}") from None
            out.append({"setup": where[0], "subtask": where[1], "score": s.score})
    return out


def score_prediction_dir(pred_dir: Path) -> dict[str, Any]:
    pred_dir = Path(pred_dir)
    if not pred_dir.is_dir():
        raise EvaluatorError(f"{pred_dir} is not a folder of RULER v2 generation files")
    lines = scored_lines(pred_dir)
    if not lines:
        raise EvaluatorError(f"no RULER v2 generations under {pred_dir}: expected NeMo-Skills' "
                             "eval-results/ruler2.<setup>.<task>/output.jsonl or an lctx samples.jsonl")
    result: dict[str, Any] = {}
    for setup, cells in table(lines).items():
        result[setup] = {t: {"accuracy": v, "n": n} for t, (v, n) in cells.items()}
        result[setup]["ruler2"] = {"accuracy": setup_score(cells), "tasks": len(cells),
                                   "all_tasks": len(cells) == len(TASKS)}
    write_json_atomic(pred_dir / OUTPUT, result)
    return result
