"""`lctx score graphwalks`: the sound set F1 and the card's literal one (`protocol`) on
predictions made elsewhere. The
folder holds one JSONL file per model (`<model>.jsonl`), one line per row of
openai/graphwalks: the row's `answer_nodes` and `problem_type`, the `data_file` it comes from
(graphwalks_128k_and_shorter.parquet or graphwalks_256k_to_1mil.parquet: its length bin) and
the model's `response` as it gave it; a row the model could not take carries
`"beyond_context": true` (no response) and is counted, not graded. Writes result.json beside
the files: per model, `protocol.table`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from checkpoints.jsonfiles import write_json_atomic
from evaluators.data import json_objects
from evaluators.datafiles import jsonl_prediction_files
from evaluators.errors import EvaluatorError
from evaluators.graphwalks import protocol
from evaluators.graphwalks.options import PROBLEM_TYPES, SETS

LAYOUT = ("one JSON object per line with answer_nodes (a list of strings), problem_type (bfs or parents), data_file "
          f"({' or '.join(SETS.values())}) and response (or beyond_context: true)")
BINS = {file: name for name, file in SETS.items()}


def graded(path: Path) -> list[dict[str, Any]]:
    rows = []
    for lineno, item in json_objects(path, "a prediction"):
        where = f"{path}:{lineno}"
        nodes = item.get("answer_nodes")
        if not isinstance(nodes, list) or not all(isinstance(x, str) for x in nodes) or \
                item.get("problem_type") not in PROBLEM_TYPES or item.get("data_file") not in BINS:
            raise EvaluatorError(f"{where}: needs {LAYOUT}")
        row: dict[str, Any] = {"problem_type": item["problem_type"], "bin": BINS[item["data_file"]],
                               "beyond_context": bool(item.get("beyond_context")), "n_truth": len(set(nodes))}
        if not row["beyond_context"]:
            if not isinstance(item.get("response"), str):
                raise EvaluatorError(f"{where}: response must be the model's text; {LAYOUT}")
            g = protocol.grade(item["response"], nodes)
            row.update(f1=g.f1, f1_card_literal=g.f1_card_literal, overlap=g.overlap, parse_error=g.parse_error,
                       parsed=g.parsed)
        rows.append(row)
    return rows


def score_prediction_dir(pred_dir: Path) -> dict[str, Any]:
    """{model name: protocol.table of its file}; writes result.json."""
    pred_dir = Path(pred_dir)
    files = jsonl_prediction_files(pred_dir, "Graphwalks", LAYOUT)
    out = {}
    for path in files:
        rows = graded(path)
        if not rows:
            raise EvaluatorError(f"{path} holds no predictions")
        out[path.stem] = protocol.table(rows)
    write_json_atomic(pred_dir / "result.json", out)
    return out
